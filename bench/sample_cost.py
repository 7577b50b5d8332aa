"""What a worker spends per sample besides the dataset's own code (issue 43.4): the row writer's check and copy.

In one process, batches of ``bench/pipelines.py``'s Augment samples (3x64x64 float32 and a label): the
dataset's ``__getitem__`` alone, the row writer (``feed/rows.py``, what a worker runs per work item) over
``__getitem__`` (the sample checked and copied into the slot), and over ``read_into`` (written in place).
Medians of ``--rounds`` batches, us per sample::

    python bench/sample_cost.py --batch 64 --rounds 30
"""

if __name__ == "__main__" and not __package__:
    import os
    import runpy
    import sys

    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runpy.run_module("bench.sample_cost", run_name="__main__", alter_sys=True)
    sys.exit(0)

import argparse
import time

import numpy as np

import theano_queue as tq
from bench.pipelines import Augment, AugmentCopying
from theano_queue.feed.rows import RowWriter


def us_per_sample(work, batch, rounds):
    """The median over ``rounds`` batches of ``work(indices)``'s time, per sample."""
    times = []
    for r in range(rounds):
        indices = list(range(r * batch, (r + 1) * batch))
        began = time.perf_counter()
        work(indices)
        times.append((time.perf_counter() - began) / batch * 1e6)
    return float(np.median(times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    q = tq.Queue([("x", Augment.dtype, (args.batch, *Augment.shape)), ("y", "int64", (args.batch,))], target="cpu")
    layout = q._layout  # what a worker's RowWriter is given (feed/child.py)
    slot = [np.zeros(c.shape, c.dtype) for c in layout.engine]
    into, copying = Augment(10**6), AugmentCopying(10**6)
    ways = {
        "__getitem__ alone": lambda indices: [into[i] for i in indices],
        "row writer, __getitem__": lambda indices: RowWriter(layout, copying, q.name).fill(slot, 0, indices),
        "row writer, read_into": lambda indices: RowWriter(layout, into, q.name).fill(slot, 0, indices),
    }
    us_per_sample(ways["__getitem__ alone"], args.batch, 3)  # warm-up
    for name, work in ways.items():
        print("%-26s %7.1f us a sample" % (name, us_per_sample(work, args.batch, args.rounds)))


if __name__ == "__main__":
    main()
