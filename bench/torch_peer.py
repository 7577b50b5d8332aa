"""The peer: PyTorch's DataLoader(pin_memory=True) with a CUDA-stream prefetcher
(side stream, wait_stream, record_stream), on the workloads of bench/run.py.

Run by bench/run.py with a Python that has PyTorch (python -m bench.torch_peer); prints one JSON line.
"""

import argparse
import json
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from bench.torch_prefetch import Prefetcher

MiB = 1 << 20


class Batches(Dataset):
    """Ready-made batches in ordinary host memory, as the queue's feeder gets them."""

    def __init__(self, pool, length):
        self.pool, self.length = pool, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return torch.from_numpy(self.pool[i % len(self.pool)])


def loader(pool, steps, workers):
    return DataLoader(
        Batches(pool, steps + 8),
        batch_size=None,
        shuffle=False,
        num_workers=workers,
        pin_memory=True,
        prefetch_factor=2 if workers else None,
        persistent_workers=False,
    )


def seconds_per_step(pool, steps, step, workers):
    batches = Prefetcher(loader(pool, steps, workers))
    for _ in range(5):
        step(next(batches))
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step(next(batches))
    return (time.perf_counter() - started) / steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4,16,64,256")
    parser.add_argument("--balanced", default="8192,4096,1024")
    parser.add_argument("--workers", default="0,4", help="DataLoader worker counts to try; the best one counts")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    worker_counts = [int(w) for w in args.workers.split(",")]
    read_one = lambda x: x[0, 0].item()  # noqa: E731  (the transfer-bound step reads a value back)

    transfer = []
    for mib in map(int, args.sizes.split(",")):
        cols = 4096
        rows = mib * MiB // (4 * cols)
        pool = [rng.standard_normal((rows, cols)).astype("float32") for _ in range(4 if mib >= 64 else 8)]
        steps = max(8, (256 if args.quick else 2048) * MiB // (mib * MiB))
        seconds, workers = min((seconds_per_step(pool, steps, read_one, w), w) for w in worker_counts)
        transfer.append({"MiB": mib, "GB/s": mib * MiB / seconds / 1e9, "workers": workers})

    rows, cols, width = map(int, args.balanced.split(","))
    pool = [rng.standard_normal((rows, cols)).astype("float32") for _ in range(4)]
    weights = torch.from_numpy((rng.standard_normal((cols, width)) / np.sqrt(cols)).astype("float32")).cuda()
    layer = lambda x: torch.tanh(x @ weights).mean().item()  # noqa: E731
    steps = 10 if args.quick else 30
    resident = torch.from_numpy(pool[0]).cuda()
    for _ in range(3):
        layer(resident)
    started = time.perf_counter()
    for _ in range(steps):
        layer(resident)
    compute_s = (time.perf_counter() - started) / steps
    transfer_s = min(seconds_per_step(pool, steps, read_one, w) for w in worker_counts)
    both_s = min(seconds_per_step(pool, steps, layer, w) for w in worker_counts)
    print(
        json.dumps(
            {
                "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "workers tried": worker_counts},
                "transfer": transfer,
                "balanced": {
                    "compute_s": compute_s,
                    "transfer_s": transfer_s,
                    "both_s": both_s,
                    "ratio": both_s / max(compute_s, transfer_s),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
