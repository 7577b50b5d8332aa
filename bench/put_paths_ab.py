"""A/B of the put paths one element's checks run on: two checkouts taking turns, ratios of medians.

    python bench/put_paths_ab.py BASE_TREE NEW_TREE [ROUNDS [PATH,PATH...]]

Each round runs one process per tree, in turn (base first, then new, then base...), each timing the best of
5 blocks of 100 elements of:

* ``put``: ``q.put(x, y)`` of a 500x784 float32 batch with uint8 labels, into a uint8 component (the
  exact dtype) and into an int32 one (the labels cast by the rule), a take after each put;
* ``generator``: a Feeder over a generator that makes each batch by fancy indexing, the consumer
  taking as fast as it can (the same element, labels into int32);
* ``arrays``: a Feeder over an array dataset of 60000 x 784 float32 rows with uint8 labels (int32
  component: the engine's gather casts them), shuffled; and its engine call alone, ``Ring.put_rows``
  of one batch then a take, in one thread (no Feeder thread to be scheduled).

Prints, per path, each tree's median microseconds per element, the spread (min to max) over the
rounds, new/base of the medians and of the minimums (on a shared machine the minimum is the run least
disturbed by others).
"""

import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import numpy as np
import theano_queue as tq

ROWS, COLS, N = 500, 784, 60000
rng = np.random.default_rng(0)
X = rng.standard_normal((N, COLS), dtype=np.float32)
Y = (np.arange(N) % 10).astype("uint8")


def queue(label="int32", capacity=4):
    return tq.Queue([("x", "float32", (ROWS, COLS)), ("y", label, (ROWS,))], capacity=capacity, target="cpu")


BLOCKS, COUNT = 5, 100  # the best of BLOCKS blocks of COUNT elements: the block least disturbed by others


def best_block(step):
    best = float("inf")
    for _ in range(BLOCKS):
        began = time.perf_counter()
        for _ in range(COUNT):
            step()
        best = min(best, (time.perf_counter() - began) / COUNT)
    return best


def per_put(label):
    q = queue(label)
    x, y = X[:ROWS].copy(), Y[:ROWS].copy()
    for _ in range(20):
        q.put(x, y)
        q.get()

    def step():
        q.put(x, y)
        q._ring.take()

    return best_block(step)


def through_feeder(dataset, **kwargs):
    q = queue(capacity=4)
    with tq.Feeder(q, dataset, **kwargs):
        for _ in range(20):
            q._ring.take()
        seconds = best_block(q._ring.take)
        q.close(cancel_pending=True)
    return seconds


def rows_put():  # the array dataset's engine call alone, in this thread: a shuffled batch put, then taken
    q = queue(capacity=4)
    order = np.random.default_rng(1).permutation(N).astype(np.int64)
    batch, extra = [0], ()
    try:
        q._ring.put_rows([X, Y], order, ROWS, 0, 1)
    except TypeError:  # a tree before the engine's rule: told which sources to cast (stop, casts)
        extra = (None, [False, True])
        q._ring.put_rows([X, Y], order, ROWS, 0, 1, *extra)
    q._ring.take()

    def step():
        first = batch[0] = (batch[0] + 1) % (N // ROWS)
        q._ring.put_rows([X, Y], order, ROWS, first, 1, *extra)
        q._ring.take()

    for _ in range(20):
        step()
    return best_block(step)


def batches():
    order = np.random.default_rng(1).permutation(N)
    while True:
        for b in range(N // ROWS):
            idx = order[b * ROWS : (b + 1) * ROWS]
            yield X[idx], Y[idx]


PATHS = {
    "put: uint8 labels": lambda: per_put("uint8"),
    "put: uint8 labels into int32": lambda: per_put("int32"),
    "generator": lambda: through_feeder(batches()),
    "arrays": lambda: through_feeder((X, Y), shuffle=True, epochs=None),
    "arrays: put_rows alone": rows_put,
}
asked = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else list(PATHS)
print(json.dumps({path: PATHS[path]() for path in asked}))
"""


def run(tree, paths):
    env = dict(os.environ, PYTHONPATH=tree, PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "-c", CHILD, paths], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    base, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    paths = sys.argv[4] if len(sys.argv) > 4 else ""  # a comma-separated choice of the paths; all by default
    times = {base: [], new: []}
    for r in range(rounds):
        for tree in (base, new) if r % 2 == 0 else (new, base):
            times[tree].append(run(tree, paths))
    print(
        "%-30s %22s %22s %9s %9s"
        % ("path (us per element)", "base median [spread]", "new median [spread]", "new/base", "of mins")
    )
    for path in times[base][0]:
        a = [t[path] * 1e6 for t in times[base]]
        b = [t[path] * 1e6 for t in times[new]]
        print(
            "%-30s %9.1f [%5.1f-%5.1f] %9.1f [%5.1f-%5.1f] %9.3f %9.3f"
            % (
                path,
                statistics.median(a),
                min(a),
                max(a),
                statistics.median(b),
                min(b),
                max(b),
                statistics.median(b) / statistics.median(a),
                min(b) / min(a),
            )
        )


if __name__ == "__main__":
    main()
