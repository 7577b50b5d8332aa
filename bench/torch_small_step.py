"""The PyTorch peer of bench/step_profile.py: how far the field's usual feeding puts a small step from its
resident one (issue 43.1's small steps).

    python -m bench.torch_small_step [--shapes 256x784,500x784] [--hidden 256] [--steps 300] [--rounds 5]

Run with a Python that has PyTorch and a GPU.  The same 3-layer MLP as step_profile (float32, ReLU,
softmax cross-entropy, plain SGD, the loss read back every step), fed four ways in interleaved rounds, best
of the rounds, each as x its own resident step:

  resident     the batch on the device already
  sliced       the whole dataset on the device, each step's batch a slice of it
  prefetched   16 ready batches in pinned memory, the next one copied on a side stream while the step
               runs (bench/torch_prefetch.py: wait_stream, record_stream)
  dataloader   DataLoader(pin_memory=True) over the arrays, a batch of rows per item, and the same
               prefetcher: PyTorch's usual loop for an in-memory dataset

Prints a table, and with --json one JSON object.
"""

import argparse
import itertools
import json
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from bench.torch_prefetch import Prefetcher

PARTS = ("resident", "sliced", "prefetched", "dataloader")


class Rows(Dataset):
    """Batch i of the arrays: rows i*batch to (i+1)*batch, as the queue's array Feeder reads them."""

    def __init__(self, data, labels, batch):
        self.data, self.labels, self.batch = data, labels, batch

    def __len__(self):
        return len(self.data) // self.batch

    def __getitem__(self, i):
        rows = slice(i * self.batch, (i + 1) * self.batch)
        return torch.from_numpy(self.data[rows]), torch.from_numpy(self.labels[rows])


def forever(loader):
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


class Step:
    """One SGD step of the MLP on (x, y) on the device, its loss read back."""

    def __init__(self, cols, hidden, seed=1):
        rng = np.random.default_rng(seed)

        def layer(n_in, n_out):
            w = (rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype("float32")
            return torch.tensor(w, device="cuda", requires_grad=True), torch.zeros(
                n_out, device="cuda", requires_grad=True
            )

        self.params = [*layer(cols, hidden), *layer(hidden, hidden), *layer(hidden, 10)]
        self.optimizer = torch.optim.SGD(self.params, lr=0.01)

    def __call__(self, x, y):
        w1, b1, w2, b2, w3, b3 = self.params
        h = torch.relu(x @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        loss = torch.nn.functional.cross_entropy(h @ w3 + b3, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.item()


def seconds_per_step(step, batches, steps, warmup=3):
    for _ in range(warmup):
        step(*next(batches))
    started = time.perf_counter()
    for _ in range(steps):
        step(*next(batches))
    return (time.perf_counter() - started) / steps


def profile(batch, cols, hidden, steps, rounds):
    rng = np.random.default_rng(0)
    n = max(64 * batch, 4096)
    data = rng.standard_normal((n, cols)).astype("float32")
    labels = rng.integers(0, 10, n).astype("int64")  # cross_entropy's targets are int64
    step = Step(cols, hidden)
    on_device = torch.from_numpy(data).cuda(), torch.from_numpy(labels).cuda()
    resident = on_device[0][:batch], on_device[1][:batch]
    pinned = [
        (
            torch.from_numpy(data[i * batch : (i + 1) * batch]).pin_memory(),
            torch.from_numpy(labels[i * batch : (i + 1) * batch]).pin_memory(),
        )
        for i in range(16)
    ]
    whole = len(data) // batch
    sources = {
        "resident": lambda: itertools.repeat(resident),
        "sliced": lambda: (
            (on_device[0][i * batch : (i + 1) * batch], on_device[1][i * batch : (i + 1) * batch])
            for i in itertools.cycle(range(whole))
        ),
        "prefetched": lambda: Prefetcher(itertools.cycle(pinned)),
        "dataloader": lambda: Prefetcher(
            forever(DataLoader(Rows(data, labels, batch), batch_size=None, shuffle=False, pin_memory=True))
        ),
    }
    times = {part: [] for part in PARTS}
    for _ in range(rounds):
        for part in PARTS:
            times[part].append(seconds_per_step(step, iter(sources[part]()), steps))
    best = {part: min(t) for part, t in times.items()}
    return {
        "shape": "%dx%d" % (batch, cols),
        "hidden": hidden,
        "rows": [
            {
                "part": part,
                "us/step": 1e6 * best[part],
                "x resident": best[part] / best["resident"],
                "spread": max(times[part]) / min(times[part]),
            }
            for part in PARTS
        ],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="256x784,500x784", help="BxF, or BxF:H with a hidden width of its own")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    results = []
    for text in args.shapes.split(","):
        shape, _, hidden = text.partition(":")
        batch, cols = (int(v) for v in shape.lower().split("x"))
        hidden = int(hidden or args.hidden)
        result = profile(batch, cols, hidden, args.steps, args.rounds)
        print(
            "PyTorch %s, %s, hidden %d, best of %d rounds:" % (torch.__version__, result["shape"], hidden, args.rounds)
        )
        for row in result["rows"]:
            print(
                "  %-11s %8.1f us  %.3f x resident  (spread %.2f)"
                % (row["part"], row["us/step"], row["x resident"], row["spread"])
            )
        results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "profiles": results}, f, indent=1)
    return results


if __name__ == "__main__":
    main()
