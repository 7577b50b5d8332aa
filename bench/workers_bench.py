"""Scenarios 11 and 12 of bench/run.py: worker processes against PyTorch's DataLoader.

    python bench/run.py --only 11,12            # both, in the full run's format
    python bench/run.py --only 11,12 --quick    # a smoke test; runs on a CPU-only machine (CPU queue)

11. A CPU-heavy per-sample pipeline (bench/pipelines.py: Augment), batch 256,
    consumed by a small GPU step (the batch's mean, read back every step).
    Samples/s of ``Feeder(q, dataset, workers=W)`` and of PyTorch's
    ``DataLoader(num_workers=W, pin_memory=True)`` with a CUDA-stream
    prefetcher, for W = 1, 2, 4, 8, 14.
12. Large samples with a cheap decode (Frames: 3x224x224 uint8), batch 256,
    against the pinned host-to-device limit at the batch's size.

Each rate is measured after the workers have started and the queue has
filled, over at least ``seconds`` of steps.
"""

import json
import time

import theano
import theano.tensor as T

import theano_queue as tq  # noqa: E402
from bench.common import reading, run_torch_peer  # noqa: E402
from bench.pipelines import PIPELINES  # noqa: E402

try:
    from theano_queue.tools.probe import h2d_seconds  # noqa: E402
except ImportError:  # a tree from before the layers (issue 42), as bench/ab.py's old tree can be
    from theano_queue.probe import h2d_seconds  # noqa: E402


# Host copies of a sample's bytes between the dataset's code and the device (doc/design.rst).
COPIES = {"theano_queue, read_into": 0, "theano_queue, __getitem__": 1, "PyTorch DataLoader": 2}


def steps(pipeline):
    if pipeline == "augment":
        return lambda x, y: x.mean()
    return lambda x, y: T.cast(x[:, 0, 0, :8], "float32").sum()


def feeder_rate(b, pipeline, workers, batch, seconds, zero_copy, capacity=4):
    """Samples/s through a queue fed by ``workers`` processes (0: the Feeder's thread), and the feeder's stats."""
    make = PIPELINES[pipeline][0 if zero_copy else 1]
    dataset = make(10**6)  # epochs=None: as many passes as it takes
    spec = [("x", make.dtype, (batch,) + make.shape), ("y", "int64", (batch,))]
    q = tq.Queue(spec, capacity=capacity, target=None if b.on_gpu else "cpu", name="%s%d" % (pipeline, workers))
    f = reading(theano.function([], steps(pipeline)(*q.dequeue())))
    with tq.Feeder(q, dataset, workers=workers, epochs=None, close_when_done=False) as feeder:
        deadline = time.monotonic() + 120
        while workers and feeder.stats().get("startup_s") is None and time.monotonic() < deadline:
            f()  # until every worker has started
        for _ in range(capacity + 2):  # and the queue has filled
            f()
        count, started = 0, time.perf_counter()
        while count < 5 or time.perf_counter() - started < seconds:
            f()
            count += 1
        elapsed = time.perf_counter() - started
        stats = feeder.stats()
        q.close(cancel_pending=True)
    return count * batch / elapsed, stats


def torch_rates(b, pipeline, worker_counts, batch, seconds):
    """PyTorch's samples/s per worker count, or a string saying why there are none."""
    if not b.on_gpu:
        return "the PyTorch peer needs a GPU"
    args = ["--pipeline", pipeline, "--workers", ",".join(map(str, worker_counts)), "--batch", batch]
    out, why = run_torch_peer(b.args.torch_python, "torch_workers_peer", args + ["--seconds", seconds], 1800)
    if why:
        return why
    peer = json.loads(out.strip().splitlines()[-1])
    b.torch_versions = peer["versions"]
    return {r["workers"]: r["samples/s"] for r in peer["rows"]}


def cpu_heavy(b):
    """Scenario 11."""
    batch = 64 if b.quick else 256
    seconds = 0.5 if b.quick else 4.0
    worker_counts = [1, 2] if b.quick else [1, 2, 4, 8, 14]
    theirs = torch_rates(b, "augment", worker_counts, batch, seconds)
    one_thread, _ = feeder_rate(b, "augment", 0, batch, seconds, zero_copy=False)
    rows = [{"workers": "0 (Feeder thread)", "theano_queue samples/s": one_thread}]
    ours = {}
    for w in worker_counts:
        ours[w], stats = feeder_rate(b, "augment", w, batch, seconds, zero_copy=False)
        row = {
            "workers": w,
            "theano_queue samples/s": ours[w],
            "x 1 worker": ours[w] / ours[worker_counts[0]],
            "workers busy": stats["busy"],
        }
        if isinstance(theirs, dict):
            row.update(
                {
                    "PyTorch samples/s": theirs[w],
                    "x 1 worker (PyTorch)": theirs[w] / theirs[worker_counts[0]],
                    "ours / PyTorch": ours[w] / theirs[w],
                }
            )
        rows.append(row)
    top = worker_counts[-1]
    zero_copy, _ = feeder_rate(b, "augment", top, batch, seconds, zero_copy=True)
    rows.append(
        {
            "workers": "%d, read_into" % top,
            "theano_queue samples/s": zero_copy,
            "x 1 worker": zero_copy / ours[worker_counts[0]],
        }
    )
    scaling = ours[top] / ours[worker_counts[0]]
    result = {
        "rows": rows,
        "batch": batch,
        "pipeline": "bench/pipelines.py Augment: 3x72x72 uint8 -> crop, flip, normalise, 3x3 blur -> 3x64x64 float32",
        "host copies per sample": COPIES,
    }
    headline = "%d workers: %.0f samples/s, %.1f x one worker; one Feeder thread %.0f" % (
        top,
        ours[top],
        scaling,
        one_thread,
    )
    if isinstance(theirs, dict):
        gains = {w: ours[w] / theirs[w] for w in worker_counts}
        result["target"] = ">= 1.0 x PyTorch at every W, >= 1.2 x at W=14; 14 workers >= 0.85 x 14 x one worker"
        result["met"] = min(gains.values()) >= 1.0 and gains[top] >= 1.2 and scaling >= 0.85 * top
        headline += "; %.2f x PyTorch at %d workers (%.2f - %.2f x over W)" % (
            gains[top],
            top,
            min(gains.values()),
            max(gains.values()),
        )
        result["torch"] = getattr(b, "torch_versions", None)
    else:
        result["peer"] = theirs
    result["headline"] = headline
    return result


def large_samples(b):
    """Scenario 12."""
    batch = 64 if b.quick else 256
    seconds = 0.5 if b.quick else 4.0
    workers = 2 if b.quick else 14
    sample_bytes = 3 * 224 * 224 + 8
    rows = []
    limit = None
    if b.on_gpu:
        limit = batch * sample_bytes / h2d_seconds(batch * sample_bytes, 50) / 1e9
        rows.append({"what": "pinned host-to-device limit, %d MiB" % (batch * sample_bytes >> 20), "GB/s": limit})
    theirs = torch_rates(b, "frames", [workers], batch, seconds)
    measured = {}
    for name, zero_copy in (("theano_queue, read_into", True), ("theano_queue, __getitem__", False)):
        rate, stats = feeder_rate(b, "frames", workers, batch, seconds, zero_copy=zero_copy)
        measured[name] = rate * sample_bytes / 1e9
        rows.append(
            {
                "what": name,
                "workers": workers,
                "samples/s": rate,
                "GB/s": measured[name],
                "host copies per sample": COPIES[name],
                "workers busy": stats["busy"],
            }
        )
    if isinstance(theirs, dict):
        measured["PyTorch DataLoader"] = theirs[workers] * sample_bytes / 1e9
        rows.append(
            {
                "what": "PyTorch DataLoader",
                "workers": workers,
                "samples/s": theirs[workers],
                "GB/s": measured["PyTorch DataLoader"],
                "host copies per sample": COPIES["PyTorch DataLoader"],
            }
        )
    if limit:
        for row in rows[1:]:
            row["x limit"] = row["GB/s"] / limit
    result = {"rows": rows, "batch": batch, "sample": "3x224x224 uint8 + int64 label"}
    best = measured["theano_queue, read_into"]
    if limit:
        result["target"] = ">= 0.90 x the pinned host-to-device limit"
        result["met"] = best / limit >= 0.90
        result["headline"] = "read_into %.1f GB/s = %.2f x the %.1f GB/s limit; __getitem__ %.2f x" % (
            best,
            best / limit,
            limit,
            measured["theano_queue, __getitem__"] / limit,
        )
        if "PyTorch DataLoader" in measured:
            result["headline"] += "; PyTorch %.2f x" % (measured["PyTorch DataLoader"] / limit)
    else:
        result["headline"] = "read_into %.2f GB/s, __getitem__ %.2f GB/s into a CPU queue (no GPU: no limit)" % (
            best,
            measured["theano_queue, __getitem__"],
        )
    if not isinstance(theirs, dict):
        result["peer"] = theirs
    return result
