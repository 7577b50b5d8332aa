"""500 random misuses of Queue, put/get, Feeder and set_stall_warning on a CPU queue: no hang, no raw message.

    .venv/bin/python -W ignore scripts/fuzz_misuse.py SEED

A case that waits 30 s dumps the stacks and exits (a hang); a refusal whose text names no part of the
package (Queue, Feeder, a component) is counted as raw and printed.  Waits asked for are a few seconds at
most, so that a long wait the caller asked for is not taken for a hang.
"""

import faulthandler
import math
import random
import sys

import numpy as np

import theano_queue as tq

rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
VALUES = [
    "x",
    2.5,
    True,
    -1,
    0,
    3,
    math.nan,
    math.inf,
    (1, 2),
    [0.5],
    {"a": 1},
    b"\x00",
    None,
    np.array([0, 1]),
    np.float32(1.5),
    10**12,
    -0.0,
    object(),
]
# A long wait asked for is not a hang: timeouts of a few seconds at most.
TIMEOUTS = [v for v in VALUES if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 3)] + [0.1]


def arr():
    return rng.choice(
        [
            np.zeros((4, 3), "float32"),
            np.zeros((4, 3), "int64"),
            np.zeros((5, 3), "float32"),
            np.zeros((4,), "float32"),
            [[0.0] * 3] * 4,
            "text",
            None,
            np.zeros((4, 3), "complex64"),
            np.zeros((0, 3), "float32"),
            np.zeros((4, 3, 1), "float32"),
            [np.zeros(3, "float32")] * 4,
        ]
    )


raw, done = [], 0


def case(i):
    q = tq.Queue([("x", "float32", (4, 3))], capacity=2, target="cpu", timeout=0.5)
    kind = rng.randrange(5)
    try:
        if kind == 0:
            tq.Queue(
                [
                    (
                        "x",
                        rng.choice(["float32", "float", "int", "bogus", 3, None]),
                        rng.choice([(4, 3), (-1,), "a", (4.5,), ()]),
                    )
                ],
                capacity=rng.choice(VALUES),
                timeout=rng.choice(VALUES),
                target="cpu",
            )
        elif kind == 1:
            q.put(arr(), timeout=rng.choice(TIMEOUTS))
        elif kind == 2:
            q.get(timeout=rng.choice(TIMEOUTS))
        elif kind == 3:
            src = rng.choice(
                [[arr() for _ in range(3)], (np.zeros((16, 3), "float32"),), (np.zeros((16, 3), "uint8"),), 5, "abc"]
            )
            arg = rng.choice(
                [
                    "workers",
                    "seed",
                    "shard",
                    "epochs",
                    "stop_timeout",
                    "timeout",
                    "start_method",
                    "state",
                    "shuffle",
                    "drop_last",
                ]
            )
            with tq.Feeder(q, src, **{arg: rng.choice(VALUES)}):
                for _ in range(4):
                    q.get(timeout=0.5)
        else:
            tq.set_stall_warning(rng.choice(VALUES)) if hasattr(tq, "set_stall_warning") else None
    except (tq.QueueClosed, tq.QueueTimeout, tq.FeederError):
        pass
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        msg = str(exc)
        if not any(w in msg for w in ("Queue", "Feeder", "component", "set_stall_warning", "theano_queue")):
            raw.append((i, kind, type(exc).__name__, msg[:160]))
    finally:
        q.close(cancel_pending=True)


def main():
    global done
    for i in range(500):
        faulthandler.dump_traceback_later(30, exit=True)
        case(i)
        faulthandler.cancel_dump_traceback_later()
        done += 1
    print("cases", done, "raw", len(raw))
    for r in raw[:20]:
        print(r)


if __name__ == "__main__":  # spawned workers import this file again
    main()
