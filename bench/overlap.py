"""Proof of overlap: with compute and transfer of similar length, a training step
fed by the queue takes about max(compute alone, transfer alone), not their sum.

    python -m bench.overlap [--rows 8192 --cols 4096 --steps 40]

All three are measured in this one run, on whatever device THEANO_FLAGS selects:
  transfer alone  the queue delivers batches to a graph that does almost nothing
  compute alone   the same compute on a batch already resident on the GPU
                  (one layer, its width chosen so that it takes about a transfer)
  both            the queue delivers batches to the full compute
Batches come from a page-locked dataset (Queue.register_host), so each element
goes over the bus straight from it.  Each step reads a scalar back, so the time
per step is real, not queued.
"""

import argparse
import json

import numpy as np
import theano

import theano_queue as tq  # noqa: E402
from bench.common import layer, reading, slices, time_steps  # noqa: E402


def balanced_width(resident, cols, target_s, rng, probe_width=1024):
    """The layer width whose step on the resident batch takes about target_s."""
    width = probe_width
    for _ in range(3):  # time is close to linear in the width: a few refinements
        step = reading(theano.function([], layer(resident, cols, width, rng)))
        width = max(128, int(round(width * target_s / time_steps(step, 10) / 128)) * 128)
    return width


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--capacity", type=int, default=3)
    parser.add_argument("--dataset-batches", type=int, default=8)
    args = parser.parse_args(argv)

    rows, cols = args.rows, args.cols
    batch_bytes = rows * cols * 4
    rng = np.random.default_rng(0)
    dataset = rng.standard_normal((args.dataset_batches * rows, cols)).astype("float32")
    resident = theano.shared(dataset[:rows])

    q = tq.Queue([("x", "float32", (rows, cols))], capacity=args.capacity, name="overlap")
    if q.on_gpu:
        q.register_host(dataset)
    x = q.dequeue()

    transfer_only = reading(theano.function([], x[0, 0]))
    with tq.Feeder(q, slices(dataset, rows)):
        transfer_s = time_steps(transfer_only, args.steps)
        width = balanced_width(resident, cols, transfer_s, rng)
        compute_only = reading(theano.function([], layer(resident, cols, width, np.random.default_rng(1))))
        both = reading(theano.function([], layer(x, cols, width, np.random.default_rng(1))))
        compute_s = time_steps(compute_only, args.steps)
        both_s = time_steps(both, args.steps)
        transfer_s = min(transfer_s, time_steps(transfer_only, args.steps))

    result = {
        "device": theano.config.device,
        "batch": [rows, cols],
        "batch_MiB": batch_bytes / 2**20,
        "layer_width": width,
        "transfer_alone_ms": 1e3 * transfer_s,
        "transfer_GBps": batch_bytes / transfer_s / 1e9,
        "compute_alone_ms": 1e3 * compute_s,
        "both_ms": 1e3 * both_s,
        "sum_ms": 1e3 * (transfer_s + compute_s),
        "ratio_to_max": both_s / max(compute_s, transfer_s),
        "consumer_wait_s": q.stats()["consumer_wait_s"],
    }
    print(json.dumps(result, indent=1))
    print(
        "step %.2f ms = %.3f x max(compute %.2f ms, transfer %.2f ms); the sum would be %.2f ms"
        % (
            result["both_ms"],
            result["ratio_to_max"],
            result["compute_alone_ms"],
            result["transfer_alone_ms"],
            result["sum_ms"],
        )
    )
    return result


if __name__ == "__main__":
    main()
