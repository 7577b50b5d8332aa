"""Random misuses of the queue on the CPU: no silent wrong data, no hang, no raw message.

    .venv/bin/python -W ignore scripts/fuzz_misuse.py [SEED [CASES]]

CASES (1000 by default) are drawn from :data:`KINDS`: misuses of Queue, put/get, Feeder and
set_stall_warning; Python integers at and past the edges of every integer dtype, through every entry
(q.put, an iterable Feeder, a map-style one, variable-length rows, Queue(pad_value=)); elements whose
components' rows differ, through every entry (q.put of arrays and of lists, q.writer, an iterable
Feeder, an array dataset, variable-length rows, a compiled Enqueue); reopen races (an epoch ended while
its Feeder runs, or fed by two Feeders in sequence: the next epoch must hold its own elements, each
once).  A value the oracle says fits (or rows that agree) must come out exactly; one that does not must
be refused.  Counted:

* silent: accepted, and what came out is not what went in (or should have been refused);
* refused: refused though it was right (also a defect, counted apart);
* raw: a refusal whose text names no part of the package (Queue, Feeder, a component);
* hang: a case that waits 30 s dumps the stacks and ends the run (exit status 1).

Waits asked for are a few seconds at most, so that a long wait the caller asked for is not taken for a
hang.  More kinds join :data:`KINDS` as ``(name, function of the case number)``.
"""

import collections
import faulthandler
import math
import random
import sys

import numpy as np

import theano_queue as tq

rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
CASES = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
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
ROWS = 4
INTEGERS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
EXPECTED = (tq.QueueClosed, tq.QueueTimeout, tq.FeederError, TypeError, ValueError, RuntimeError, OverflowError)

counts = collections.Counter()
raw, silent, refused = [], [], []


class Silent(Exception):
    """What came out is not what went in."""


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


# ---- misuses of the API (the first 500-case fuzz) ---------------------------------------------------------


def misuse(i):
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
    finally:
        q.close(cancel_pending=True)


# ---- integers at and past the edges ---------------------------------------------------------------------


def fits(value, dtype):
    info = np.iinfo(dtype)
    return int(info.min) <= value <= int(info.max)


def edge_value(dtype):
    """A Python int at, just inside or just past an edge of ``dtype`` or of a 64-bit dtype."""
    info = np.iinfo(dtype)
    edge = rng.choice([int(info.min), int(info.max), 0, -(2**63), 2**63 - 1, 2**64 - 1, 2**64])
    return edge + rng.choice([-1, 0, 1])


def drain(q):
    got = []
    while True:
        try:
            got.append(q.get(timeout=5))
        except tq.QueueClosed:
            return got


class Samples:
    def __init__(self, values):
        self.values = values

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        return np.zeros(3, "float32"), self.values[i]


def integer_edges(i):
    """One entry, one dtype, ROWS values near its edges: taken exactly when every one fits, else refused."""
    dtype = rng.choice(INTEGERS)
    values = [edge_value(dtype) for _ in range(ROWS)]
    entry = rng.choice(["put", "iterable", "map", "rows", "pad"])
    counts["ints:" + entry] += 1
    ok = all(fits(v, dtype) for v in values)
    x = np.zeros((ROWS, 3), "float32")
    if entry == "pad":
        try:
            q = tq.Queue([("t", dtype, (ROWS, tq.upto(3)))], target="cpu", pad_value=values[0])
        except TypeError:
            return check_refusal(i, entry, fits(values[0], dtype), dtype, values[:1])
        q.put([[1], [1, 1]])
        got = int(q.get()[0][0, 1])
        return check_taken(i, entry, fits(values[0], dtype), dtype, [values[0]], [got])
    if entry == "rows":
        q = tq.Queue([("t", dtype, (ROWS, tq.upto(ROWS))), ("x", "float32", (ROWS, 3))], target="cpu", timeout=5)
        try:
            q.put([values[: k + 1] for k in range(ROWS)], x)
        except TypeError:
            return check_refusal(i, entry, ok, dtype, values)
        t, lengths = q.get(lengths=True)[0::2]
        return check_taken(i, entry, ok, dtype, values, [int(v) for v in t[ROWS - 1, :ROWS]])
    q = tq.Queue([("x", "float32", (ROWS, 3)), ("y", dtype, (ROWS,))], capacity=2, target="cpu", timeout=5)
    try:
        if entry == "put":
            q.put(x, values)
            got = drain_one(q)
        else:
            dataset = [(x, values)] if entry == "iterable" else Samples(values)
            with tq.Feeder(q, dataset, epochs=1):
                got = drain(q)
    except (TypeError, tq.FeederError) as exc:
        if isinstance(exc, tq.FeederError) and "fit dtype" not in str(exc):
            raise
        return check_refusal(i, entry, ok, dtype, values)
    finally:
        q.close(cancel_pending=True)
    taken = [int(v) for element in got for v in element[1]]
    return check_taken(i, entry, ok, dtype, values, taken)


def drain_one(q):
    q.close()
    return drain(q)


def check_taken(i, entry, ok, dtype, values, taken):
    if not ok or taken != values:
        silent.append((i, entry, dtype, values, taken))


def check_refusal(i, entry, ok, dtype, values):
    if ok:
        refused.append((i, entry, dtype, values))


# ---- rows that differ ---------------------------------------------------------------------------------------


def rows_differ(i):
    """An element whose x and y have n and m rows: taken (exactly) only when n == m, else refused."""
    n, m = rng.randrange(1, ROWS + 1), rng.randrange(1, ROWS + 1)
    entry = rng.choice(["put", "put lists", "writer", "iterable", "arrays", "rows", "enqueue"])
    counts["rows:" + entry] += 1
    x = np.arange(n * 3, dtype="float32").reshape(n, 3)
    y = np.arange(m, dtype="int32")
    spec = [("x", "float32", (ROWS, 3)), ("y", "int32", (ROWS,))]
    if entry == "rows":
        spec = [("x", "float32", (ROWS, tq.upto(3))), ("y", "int32", (ROWS,))]
    q = tq.Queue(spec, capacity=2, target="cpu", timeout=5)
    try:
        if entry == "put":
            q.put(x, y)
        elif entry == "put lists":
            q.put(x.tolist(), y.tolist())
        elif entry == "rows":
            q.put([row[: 1 + r % 3] for r, row in enumerate(x)], y)
        elif entry == "writer":
            rows = rng.choice([n, (n, m)])  # slot.rows is one number, the batch's: a pair is refused
            try:
                with q.writer() as slot:
                    slot["x"][:n] = x
                    slot["y"][:n] = np.arange(n)
                    slot.rows = rows
            except TypeError as exc:
                if not isinstance(rows, tuple) or "slot.rows" not in str(exc):
                    raise
                return
            got = q.get()
            if isinstance(rows, tuple) or [len(a) for a in got] != [n, n] or not np.array_equal(got[0], x):
                silent.append((i, entry, n, m, [len(a) for a in got]))
            return
        elif entry == "enqueue":
            enqueue(q, x, y)
        else:
            with tq.Feeder(q, [(x, y)] if entry == "iterable" else (x, y), epochs=1):
                got = drain(q)
            if n != m:
                silent.append((i, entry, n, m, [len(a) for a in got[0]] if got else None))
            return
        got = q.get()
    except (ValueError, tq.FeederError) as exc:
        if "rows and component" not in str(exc) and not (entry == "arrays" and "rows" in str(exc)):
            raise
        if n == m:
            refused.append((i, entry, n, m))
        return
    finally:
        q.close(cancel_pending=True)
    if n != m or len(got[0]) != n or not np.array_equal(got[1], y[:n]):
        silent.append((i, entry, n, m, [len(a) for a in got]))


_enqueues = {}


def enqueue(q, x, y):
    """A compiled Enqueue of q's element (one function per queue: compiled once, then cached by Theano)."""
    import theano
    import theano.tensor as T

    xs, ys = T.matrix("x", dtype="float32"), T.vector("y", dtype="int32")
    theano.function([xs, ys], q.enqueue(xs, ys))(x, y)


# ---- reopen races ------------------------------------------------------------------------------------


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
    fed by two Feeders started one after the other; then the next epoch: it must hold its own elements, once.
    An element of one epoch in the next, or one lost or taken twice, is silent wrong data."""
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
                silent.append((i, how, "took %s, put %s" % (got, want)))
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
            silent.append((i, how, "the next epoch took %s" % got))
    except (tq.QueueClosed, tq.QueueTimeout) as exc:
        silent.append((i, how, "%s: %s" % (type(exc).__name__, exc)))
    finally:
        q.close(cancel_pending=True)


KINDS = [
    ("misuse", misuse),
    ("integer edges", integer_edges),
    ("rows differ", rows_differ),
    ("reopen races", reopen_race),
]


def case(i):
    name, run = rng.choice(KINDS)
    counts[name] += 1
    try:
        run(i)
    except EXPECTED as exc:
        msg = str(exc)
        if not any(w in msg for w in ("Queue", "Feeder", "component", "set_stall_warning", "theano_queue")):
            raw.append((i, name, type(exc).__name__, msg[:160]))


def main():
    for i in range(CASES):
        faulthandler.dump_traceback_later(30, exit=True)  # a hang: the stacks, and exit status 1
        case(i)
        faulthandler.cancel_dump_traceback_later()
    print("cases", CASES, "silent", len(silent), "hangs", 0, "raw", len(raw), "refused", len(refused))
    print("by kind", dict(sorted(counts.items())))
    for what, found in (("silent", silent), ("raw", raw), ("refused", refused)):
        for r in found[:20]:
            print(what, r)
    return 1 if silent or raw or refused else 0


if __name__ == "__main__":  # spawned workers import this file again
    sys.exit(main())
