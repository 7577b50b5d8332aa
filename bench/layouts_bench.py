"""Scenario 26 of bench/run.py (issue 26): array datasets whose rows are not the slots' bytes as they stand.

* MNIST's shapes (batch 500 x 1 x 28 x 28 float32, shuffled): labels kept as uint8 and read as int32, against
  the same data with int32 labels, side by side (target: within 1.05 x).
* The same 784-float rows from a Fortran-order memmap and from a strided view, against a C-contiguous array
  (target: within 1.5 x), with the peak of numpy's allocations while feeding (tracemalloc: a copy of the
  whole array would show) and the anonymous memory the process grew by, in batches.

Each case: a Feeder over the arrays (shuffled, without end) into a queue, and a compiled step that reads a
little of every batch (the producer's cost is what is measured).  It runs on the CPU (a CPU queue) and on a
GPU alike.

Against another tree (the commit before, on the same machine, in one call; the trees take turns):

    python bench/layouts_bench.py --against /tmp/base-gather [--quick]

runs each case in a fresh process with PYTHONPATH set to each tree in turn, three rounds, and prints the
median ms per step of both and their ratio.  This file imports nothing of bench/ so that it runs on a tree
that lacks it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

BATCH = 500
CASES = ["mnist int32 labels", "mnist uint8 labels", "C-contiguous", "Fortran memmap", "strided view"]
#: Cases compared with the one before them: (case, reference, target ratio).
RATIOS = [
    ("mnist uint8 labels", "mnist int32 labels", 1.05),
    ("Fortran memmap", "C-contiguous", 1.5),
    ("strided view", "C-contiguous", 1.5),
]


def rss_anon_bytes():
    """The process's anonymous resident memory (file pages of a memmap are not counted)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def make_sources(case, n, rng, tmpdir):
    """(x, y) of the case: n rows of 1 x 28 x 28 or 784 float32, and labels."""
    labels = rng.integers(0, 10, n)
    if case.startswith("mnist"):
        x = rng.standard_normal((n, 1, 28, 28), dtype="float32")
        return x, labels.astype("uint8" if "uint8" in case else "int32")
    y = labels.astype("int32")
    if case == "C-contiguous":
        return rng.standard_normal((n, 784), dtype="float32"), y
    if case == "strided view":
        wide = np.empty((n, 2 * 784), dtype="float32")
        wide[:, ::2] = rng.standard_normal((n, 784), dtype="float32")
        return wide[:, ::2], y
    path = os.path.join(tmpdir, "x.f32")
    mapped = np.memmap(path, "float32", "w+", shape=(n, 784), order="F")
    for lo in range(0, 784, 98):  # a column block at a time: the file is written in order
        mapped[:, lo : lo + 98] = rng.standard_normal((n, 98), dtype="float32")
    mapped.flush()
    del mapped
    return np.memmap(path, "float32", "r", shape=(n, 784), order="F"), y


def copy_bandwidth(x):
    """Bytes per second a numpy copy of an array the size of x moves (each byte read once, written once): the
    machine's memory bandwidth as one thread sees it, measured beside the case."""
    src = np.ones(x.size, dtype=x.dtype)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - started)
    return src.nbytes / best


def lines_per_batch(x, rng, batches=5):
    """The 64-byte lines of memory a shuffled batch of x's rows lies in, the mean over a few batches."""
    address = x.__array_interface__["data"][0]
    inner = np.zeros(1, dtype=np.int64)  # the byte offsets of a row's elements
    for n, stride in zip(x.shape[1:], x.strides[1:]):
        inner = (inner[:, None] + np.arange(n, dtype=np.int64)[None, :] * stride).ravel()
    counts = []
    for _ in range(batches):
        rows = rng.choice(len(x), BATCH, replace=False).astype(np.int64)
        at = address + rows[:, None] * x.strides[0] + inner[None, :]
        lines = np.unique(at // 64)
        if x.itemsize > 1:  # an element that crosses a line's end
            lines = np.union1d(lines, (at + x.itemsize - 1) // 64)
        counts.append(len(lines))
    return float(np.mean(counts))


def measure(case, quick):
    """ms per step of a light consumer fed by an array Feeder, peak memory while feeding, who gathered."""
    import theano

    import theano_queue as tq

    n, steps = (10000, 40) if quick else (60000, 200)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmpdir:
        x, y = make_sources(case, n, rng, tmpdir)
        q = tq.Queue([("x", "float32", (BATCH,) + x.shape[1:]), ("y", "int32", (BATCH,))], capacity=3, name="layouts")
        xv, yv = q.dequeue()
        flat = xv.reshape((BATCH, -1))
        step = theano.function([], flat[:, 0].sum() + flat[:, -1].sum() + yv.sum())
        best = float("inf")
        with tq.Feeder(q, (x, y), shuffle=True, epochs=None, drop_last=True, close_when_done=False) as feeder:
            for _ in range(5):
                step()
            for _ in range(3):
                started = time.perf_counter()
                for _ in range(steps):
                    float(np.asarray(step()))
                best = min(best, (time.perf_counter() - started) / steps)
            gather = feeder.stats()["gather"]
        q.close(cancel_pending=True)
        q.reopen()
        # Memory, apart: tracemalloc slows numpy's allocations down.
        anon = rss_anon_bytes()
        tracemalloc.start()
        with tq.Feeder(q, (x, y), shuffle=True, epochs=None, drop_last=True, close_when_done=False):
            for _ in range(20):
                step()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        grown = rss_anon_bytes() - anon
        q.close(cancel_pending=True)
        lines = lines_per_batch(x, rng)
        bandwidth = copy_bandwidth(x)
    batch_bytes = BATCH * 784 * 4
    return {
        "case": case,
        "ms": 1e3 * best,
        "gather": gather if isinstance(gather, str) else ",".join("%s:%s" % kv for kv in gather.items()),
        "peak batches": peak / batch_bytes,
        "anon grown batches": grown / batch_bytes,
        # The memory a batch's images lie in, and the rate the feeding read it at (a step is a batch), against
        # a numpy copy's: what a layout costs whatever the walk.
        "x lines per batch": lines,
        "x line GB/s": lines * 64 / best / 1e9,
        "copy GB/s": bandwidth / 1e9,
    }


def ratios(rows):
    by_case = {r["case"]: r for r in rows}
    return {
        "%s / %s" % (case, ref): by_case[case]["ms"] / by_case[ref]["ms"]
        for case, ref, _ in RATIOS
        if case in by_case and ref in by_case
    }


def layouts(b):
    """Scenario 26: every case in this process, the ratios against their references."""
    rows = [measure(case, b.quick) for case in CASES]
    found = ratios(rows)
    targets = {"%s / %s" % (case, ref): target for case, ref, target in RATIOS}
    memory_ok = all(r["peak batches"] < 2 for r in rows)
    return {
        "rows": rows,
        "ratios": found,
        "target": "uint8 labels <= 1.05 x int32; Fortran memmap and strided <= 1.5 x C-contiguous; peak < 2 batches",
        "met": memory_ok and all(found[k] <= targets[k] for k in found),
        "headline": ", ".join("%s %.2f" % kv for kv in found.items())
        + "; peak %.2f batches at most" % max(r["peak batches"] for r in rows),
    }


def run_in(tree, case, quick):
    """measure(case) in a fresh process importing theano_queue from tree."""
    # The tree first, before whatever else the environment puts on the path (a GPU machine's own stack).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")])))
    command = [sys.executable, os.path.abspath(__file__), "--measure", case] + (["--quick"] if quick else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tree, timeout=1800)
    if done.returncode:
        raise RuntimeError("%s in %s failed:\n%s" % (case, tree, done.stderr[-3000:]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def against(base, quick, rounds=3, cases=None):
    """Each case in this tree and in base, taking turns, `rounds` times; prints the medians side by side."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results = {tree: {c: [] for c in cases or CASES} for tree in (here, base)}
    for _ in range(rounds):
        for case in cases or CASES:
            for tree in (here, base):
                row = run_in(tree, case, quick)
                results[tree][case].append(row)
                # Each measurement as it comes: a run stopped at its limit still tells what it measured.
                print("%s %s" % ("new " if tree == here else "base", json.dumps(row)), flush=True)
    print("%-22s %10s %10s %8s  %-28s %-28s" % ("case", "new ms", "base ms", "new/base", "new gather", "base gather"))
    medians = {}
    for case in cases or CASES:
        new = statistics.median(r["ms"] for r in results[here][case])
        old = statistics.median(r["ms"] for r in results[base][case])
        medians[case] = (new, old)
        print(
            "%-22s %10.3f %10.3f %8.3f  %-28s %-28s"
            % (case, new, old, new / old, results[here][case][0]["gather"], results[base][case][0]["gather"])
        )
    for name, tree in (("new", here), ("base", base)):
        rows = [dict(results[tree][c][0], ms=medians[c][0 if name == "new" else 1]) for c in cases or CASES]
        peaks = ", ".join("%s %.2f" % (r["case"], r["peak batches"]) for r in rows)
        print("%s: %s; peak batches: %s" % (name, ", ".join("%s %.3f" % kv for kv in ratios(rows).items()), peaks))
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--measure", help="one case, printed as JSON (used by --against)")
    parser.add_argument("--against", help="another tree to compare with, e.g. /tmp/base-gather")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="", help="comma-separated cases (default: all)")
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c] or None
    if args.measure:
        print(json.dumps(measure(args.measure, args.quick)))
    elif args.against:
        against(os.path.abspath(args.against), args.quick, args.rounds, cases)
    else:
        for case in cases or CASES:
            print(json.dumps(measure(case, args.quick)), flush=True)


if __name__ == "__main__":
    main()
