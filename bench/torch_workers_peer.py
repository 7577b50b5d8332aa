"""The peer of the worker scenarios (bench/run.py 11 and 12): PyTorch's
DataLoader(num_workers=W, pin_memory=True) with a CUDA-stream prefetcher, on
the per-sample pipelines of bench/pipelines.py, consumed by a small GPU step.

Run by bench/run.py with a Python that has PyTorch (python -m bench.torch_workers_peer); prints
one JSON line: samples/s for each worker count.

Host copies per sample on this path (counted in doc/design.rst): the sample
made by __getitem__, then (1) default_collate stacks the samples into a batch
in shared memory inside the worker, (2) the pin-memory thread copies the batch
into page-locked memory, then the DMA to the device.
"""

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader

from bench.pipelines import PIPELINES
from bench.torch_prefetch import Prefetcher

STEPS = {
    "augment": lambda x, y: x.mean().item(),
    "frames": lambda x, y: x[:, 0, 0, :8].float().sum().item(),
}


def samples_per_s(pipeline, workers, batch, seconds, least=5):
    dataset = PIPELINES[pipeline][1](10**7)  # the copying variant: __getitem__ is all PyTorch uses
    loader = DataLoader(
        dataset,
        batch_size=batch,
        num_workers=workers,
        pin_memory=True,
        drop_last=True,
        prefetch_factor=2 if workers else None,
        persistent_workers=False,
    )
    step = STEPS[pipeline]
    batches = Prefetcher(loader)
    for _ in range(max(3, 2 * workers)):  # the workers start and fill their prefetch
        step(*next(batches))
    torch.cuda.synchronize()
    count, started = 0, time.perf_counter()
    while count < least or time.perf_counter() - started < seconds:
        step(*next(batches))
        count += 1
    elapsed = time.perf_counter() - started
    del batches, loader
    return count * batch / elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", choices=sorted(PIPELINES), default="augment")
    parser.add_argument("--workers", default="1,2,4,8,14")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    rows = [
        {"workers": w, "samples/s": samples_per_s(args.pipeline, w, args.batch, args.seconds)}
        for w in map(int, args.workers.split(","))
    ]
    print(json.dumps({"versions": {"torch": torch.__version__, "cuda": torch.version.cuda}, "rows": rows}))


if __name__ == "__main__":
    main()
