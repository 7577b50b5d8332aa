"""Proof of overlap: with compute and transfer of similar length, a training step
fed by the queue takes about max(compute alone, transfer alone), not their sum.

    python bench/overlap.py [--rows 8192 --cols 4096 --steps 40]

All three are measured in this one run, on whatever device THEANO_FLAGS selects:
  transfer alone  the queue delivers batches to a graph that does almost nothing
  compute alone   the same compute on a batch already resident on the GPU
  both            the queue delivers batches to the full compute
Batches come from a page-locked dataset (Queue.register_host), so each element
goes over the bus straight from it.  Each step reads a scalar back, so the time
per step is real, not queued.
"""
import argparse
import json
import time

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq


def time_steps(step, steps, warmup=5):
    for _ in range(warmup):
        step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def compute(x, weights, repeats):
    """repeats matmuls of the batch: the knob that balances compute against transfer."""
    h = x
    for _ in range(repeats):
        h = T.tanh(T.dot(h, weights))
    return h.mean()


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
    weights = theano.shared((rng.standard_normal((cols, cols)) / np.sqrt(cols)).astype("float32"))
    resident = theano.shared(dataset[:rows])

    q = tq.Queue([("x", "float32", (rows, cols))], capacity=args.capacity, name="overlap")
    if q.on_gpu:
        q.register_host(dataset)
    x = q.dequeue()

    def batches():
        while True:
            for i in range(args.dataset_batches):
                yield dataset[i * rows:(i + 1) * rows]

    # Calibrate: the number of matmuls whose time is closest to one transfer.
    one_matmul = theano.function([], compute(resident, weights, 1))
    transfer_only = theano.function([], x[0, 0])
    with tq.Feeder(q, batches()):
        transfer_s = time_steps(transfer_only, args.steps)
        matmul_s = time_steps(one_matmul, 10)
        repeats = max(1, int(round(transfer_s / matmul_s)))
        compute_only = theano.function([], compute(resident, weights, repeats))
        both = theano.function([], compute(x, weights, repeats))
        compute_s = time_steps(compute_only, args.steps)
        both_s = time_steps(both, args.steps)
        transfer_again_s = time_steps(transfer_only, args.steps)
    transfer_s = min(transfer_s, transfer_again_s)

    result = {
        "device": theano.config.device,
        "batch": [rows, cols],
        "batch_MiB": batch_bytes / 2**20,
        "matmuls_per_step": repeats,
        "transfer_alone_ms": 1e3 * transfer_s,
        "transfer_GBps": batch_bytes / transfer_s / 1e9,
        "compute_alone_ms": 1e3 * compute_s,
        "both_ms": 1e3 * both_s,
        "sum_ms": 1e3 * (transfer_s + compute_s),
        "ratio_to_max": both_s / max(compute_s, transfer_s),
        "consumer_wait_s": q.stats()["consumer_wait_s"],
    }
    print(json.dumps(result, indent=1))
    print("step %.2f ms = %.3f x max(compute %.2f ms, transfer %.2f ms); the sum would be %.2f ms"
          % (result["both_ms"], result["ratio_to_max"], result["compute_alone_ms"], result["transfer_alone_ms"],
             result["sum_ms"]))
    return result


if __name__ == "__main__":
    main()
