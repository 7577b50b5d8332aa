"""500 random misuses of Queue, put/get, Feeder and set_stall_warning on a CPU queue: no hang, no raw message;
then 200 reopen races (reopen_race): no element of one epoch in the next, and none lost or taken twice.

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


wrong = []  # (case, what): silent wrong data from a reopen race, an element of the last epoch in the next


def tagged(n, tag):
    """n batches of the reopen cases' queue, every value tag * 1000 + i: the tag names the epoch that put it."""
    return [np.full(4, tag * 1000 + i, "int64") for i in range(n)]


def endless(tag):
    i = 0
    while True:
        yield np.full(4, tag * 1000 + i, "int64")
        i += 1


def take_all(q):
    got = []
    while True:
        try:
            got.append(int(q.get(timeout=10)[0][0]))
        except tq.QueueClosed:
            return got


def take_some(q, n):
    for _ in range(n):
        try:
            q.get(timeout=10)
        except tq.QueueClosed:
            return


def reopen_race(i):
    """An epoch ended at a random point (a reopen while its Feeder runs, a with block left early, a cancel), or
    fed by two Feeders started one after the other; then the next epoch: it must hold its own elements, once."""
    q = tq.Queue([("x", "int64", (4,))], capacity=rng.choice([1, 2, 4]), target="cpu")
    how = rng.choice(["reopen while running", "with block left", "cancel then reopen", "two in sequence"])
    try:
        if how == "two in sequence":
            first = tq.Feeder(q, tagged(rng.randrange(4), 0)).start()
            if rng.random() < 0.5:
                first.join(10)
            second = tq.Feeder(q, tagged(rng.randrange(1, 4), 1)).start()
            got = take_all(q)
            want = sorted(int(b[0]) for b in list(first.dataset) + list(second.dataset))
            if sorted(got) != want:
                wrong.append((i, how, "took %s, put %s" % (got, want)))
            first.close()
            second.close()
        else:
            source = endless(0) if rng.random() < 0.5 else tagged(rng.randrange(1, 12), 0)
            taken = rng.randrange(3)  # a source shorter than that ends the epoch by itself: QueueClosed
            if how == "with block left":
                with tq.Feeder(q, source):
                    take_some(q, taken)
            else:
                tq.Feeder(q, source).start()
                take_some(q, taken)
                if how == "cancel then reopen":
                    q.close(cancel_pending=True)
        try:
            q.reopen()
        except tq.QueueError as exc:  # a run that ended on its own left elements: refused, never mixed
            if "still holds" not in str(exc):
                raise
            q.close(cancel_pending=True)
            q.reopen()
        with tq.Feeder(q, tagged(3, 9)):
            got = take_all(q)
        if got != [9000, 9001, 9002]:
            wrong.append((i, how, "the next epoch took %s" % got))
    except (tq.QueueClosed, tq.QueueTimeout) as exc:
        wrong.append((i, how, "%s: %s" % (type(exc).__name__, exc)))
    finally:
        q.close(cancel_pending=True)


def main():
    global done
    for i in range(500):
        faulthandler.dump_traceback_later(30, exit=True)
        case(i)
        faulthandler.cancel_dump_traceback_later()
        done += 1
    for i in range(200):
        faulthandler.dump_traceback_later(30, exit=True)
        reopen_race(i)
        faulthandler.cancel_dump_traceback_later()
        done += 1
    print("cases", done, "raw", len(raw), "wrong", len(wrong))
    for r in raw[:20]:
        print(r)
    for w in wrong[:20]:
        print(w)


if __name__ == "__main__":  # spawned workers import this file again
    main()
