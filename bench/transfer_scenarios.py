"""Scenarios 1-9 of bench/run.py: the bus's limit, transfer-bound, balanced and compute-bound steps, small
batches, the PyTorch peer, uint8 over the bus, reading the loss back, and the CPU target."""

import argparse
import json
import time

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq
from bench.common import (
    MiB,
    best_of,
    cycle,
    layer,
    mlp_train_step,
    queue_throughput,
    reading,
    run_torch_peer,
    slices,
    time_steps,
)
from bench.scenario import scenario
from theano_queue import _engine

try:
    from theano_queue.tools.probe import h2d_seconds
except ImportError:  # a tree from before the layers (issue 42), as bench/ab.py's old tree can be
    from theano_queue.probe import h2d_seconds


# ---- 1 -------------------------------------------------------------------------------


@scenario(1, "Limit: raw pinned host-to-device bandwidth")
def limit(b):
    rows = []
    for mib in b.sizes_mib() + ([128] if not b.quick else []):
        seconds = best_of(lambda: h2d_seconds(mib * MiB, b.steps_for(mib * MiB, 4096)))
        rows.append({"MiB": mib, "GB/s": mib * MiB / seconds / 1e9})
    rows.sort(key=lambda r: r["MiB"])
    b.limit = {r["MiB"]: r["GB/s"] for r in rows}
    # What the dequeue's device-to-device copy of a slot costs next to its trip over the bus.
    import pygpu

    mib = 16 if b.quick else 128
    x = pygpu.gpuarray.zeros((mib * MiB // 4,), dtype="float32", context=b.context)
    np.asarray(x[:1])
    d2d = time_steps(lambda: np.asarray(x.copy()[:1]), 20)
    rows.append(
        {
            "MiB": mib,
            "device-to-device GB/s": mib * MiB / d2d / 1e9,
            "PCIe time / D2D time": (mib * MiB / b.limit[mib] / 1e9) / d2d,
        }
    )
    return {
        "rows": rows,
        "headline": "pinned H2D %.1f GB/s at %d MiB; a slot's D2D copy costs 1/%.0f of its PCIe trip"
        % (b.limit[max(b.limit)], max(b.limit), rows[-1]["PCIe time / D2D time"]),
    }


# ---- 2 -------------------------------------------------------------------------------


@scenario(2, "Transfer-bound: effective bandwidth through the queue", needs=(1,))
def transfer_bound(b):
    rows_out = []
    for mib in b.sizes_mib():
        cols = 4096
        rows = mib * MiB // (4 * cols)
        for kind in ("numpy", "registered"):
            seconds = queue_throughput(b, rows, cols, kind)
            gbps = mib * MiB / seconds / 1e9
            rows_out.append({"MiB": mib, "source": kind, "GB/s": gbps, "x limit": gbps / b.limit[mib]})
    b.transfer = rows_out
    worst = {kind: min(r["x limit"] for r in rows_out if r["source"] == kind) for kind in ("numpy", "registered")}
    return {
        "rows": rows_out,
        "target": ">= 0.90 x limit",
        "met": min(worst.values()) >= 0.90,
        "headline": "numpy batches >= %.2f x limit, registered >= %.2f x limit" % (worst["numpy"], worst["registered"]),
    }


# ---- 3 -------------------------------------------------------------------------------


@scenario(3, "Balanced: compute about equal to transfer, and the baselines", needs=(1,))
def balanced(b):
    rows, cols = (2048, 4096) if b.quick else (8192, 4096)
    nbytes = rows * cols * 4
    steps = 10 if b.quick else 30
    dataset = b.rng.standard_normal((4 * rows, cols)).astype("float32")
    resident = theano.shared(dataset[:rows])
    q = tq.Queue([("x", "float32", (rows, cols))], capacity=3, name="balanced")
    q.register_host(dataset)
    x = q.dequeue()

    transfer = reading(theano.function([], x[0, 0]))
    with tq.Feeder(q, slices(dataset, rows), close_when_done=False):
        transfer_s = best_of(lambda: time_steps(transfer, steps))
    q.close(cancel_pending=True)
    q.reopen()

    # The layer width whose compute takes about one transfer.
    width = 1024
    for _ in range(3):
        probe = reading(theano.function([], layer(resident, cols, width, b.rng)))
        width = max(128, int(round(width * transfer_s / time_steps(probe, 5) / 128)) * 128)
    weights_rng = np.random.default_rng(1)
    compute = reading(theano.function([], layer(resident, cols, width, weights_rng)))
    weights_rng = np.random.default_rng(1)
    fed = reading(theano.function([], layer(x, cols, width, weights_rng)))
    numpy_in = T.fmatrix("numpy_in")
    weights_rng = np.random.default_rng(1)
    given_numpy = theano.function([numpy_in], layer(numpy_in, cols, width, weights_rng))
    host_batches = [dataset[i * rows : (i + 1) * rows].copy() for i in range(4)]
    numbered = iter(cycle(host_batches))

    # The shared-variable idiom: load a chunk, then index minibatches from it.
    chunk = theano.shared(np.concatenate(host_batches[:2]))
    index = T.lscalar("index")
    weights_rng = np.random.default_rng(1)
    from_chunk = theano.function([index], layer(chunk[index * rows : (index + 1) * rows], cols, width, weights_rng))

    def shared_idiom_step():  # two steps per chunk load, per step
        chunk.set_value(np.concatenate(host_batches[:2]))
        float(from_chunk(0))
        float(from_chunk(1))

    compute_s = best_of(lambda: time_steps(compute, steps))
    with tq.Feeder(q, slices(dataset, rows), close_when_done=False):
        both_s = best_of(lambda: time_steps(fed, steps))
    q.close(cancel_pending=True)
    numpy_s = best_of(lambda: time_steps(lambda: float(given_numpy(next(numbered))), max(5, steps // 3)))
    shared_s = best_of(lambda: time_steps(shared_idiom_step, max(3, steps // 6))) / 2
    q.unregister_host(dataset)
    b.balanced = {
        "rows": rows,
        "cols": cols,
        "width": width,
        "transfer_s": transfer_s,
        "compute_s": compute_s,
        "both_s": both_s,
    }
    ratio = both_s / max(compute_s, transfer_s)
    table = [
        {"what": "transfer alone (queue)", "ms": 1e3 * transfer_s},
        {"what": "compute alone (resident)", "ms": 1e3 * compute_s},
        {"what": "theano_queue: both", "ms": 1e3 * both_s, "x max": ratio},
        {"what": "theano.function given numpy", "ms": 1e3 * numpy_s, "x max": numpy_s / max(compute_s, transfer_s)},
        {
            "what": "shared-variable idiom (2 batches a chunk)",
            "ms": 1e3 * shared_s,
            "x max": shared_s / max(compute_s, transfer_s),
        },
    ]
    return {
        "rows": table,
        "batch": [rows, cols],
        "MiB": nbytes / MiB,
        "layer_width": width,
        "target": "<= 1.05 x max(compute, transfer)",
        "met": ratio <= 1.05,
        "headline": "step = %.3f x max(compute, transfer); numpy input %.2f x, shared idiom %.2f x"
        % (ratio, table[3]["x max"], table[4]["x max"]),
    }


@scenario(3.5, "Balanced: 3-layer MLP training step on 128 MiB batches", needs=(1,))
def mlp(b):
    rows, cols, hidden = (2048, 4096, 1024) if b.quick else (8192, 4096, 1024)
    nbytes = rows * cols * 4
    steps = 10 if b.quick else 30
    dataset = b.rng.standard_normal((3 * rows, cols)).astype("float32")
    labels = b.rng.integers(0, 10, rows).astype("int32")
    q = tq.Queue([("x", "float32", (rows, cols)), ("y", "int32", (rows,))], capacity=3, name="mlp")
    x, y = q.dequeue()

    def compiled(x_var, y_var, inputs=()):
        loss, updates = mlp_train_step(x_var, y_var, cols, hidden, 10, np.random.default_rng(2))
        return theano.function(list(inputs), loss, updates=updates)

    resident = reading(compiled(theano.shared(dataset[:rows]), theano.shared(labels)))
    fed = reading(compiled(x, y))
    xin, yin = T.fmatrix("x"), T.ivector("y")
    given = compiled(xin, yin, (xin, yin))
    host_batches = [dataset[i * rows : (i + 1) * rows].copy() for i in range(3)]
    numbered = iter(cycle(host_batches))

    resident_s = best_of(lambda: time_steps(resident, steps))
    results = {}
    for kind in ("registered", "numpy"):
        if kind == "registered":
            q.register_host(dataset)
            source = ((block, labels) for block in slices(dataset, rows))
        else:
            source = ((block, labels) for block in cycle(host_batches))
        q.reopen()
        with tq.Feeder(q, source, close_when_done=False):
            results[kind] = best_of(lambda: time_steps(fed, steps))
        q.close(cancel_pending=True)
        if kind == "registered":
            q.unregister_host(dataset)
    numpy_s = best_of(lambda: time_steps(lambda: float(given(next(numbered), labels)), max(5, steps // 3)))
    pinned_copy_s = nbytes / (b.limit.get(128, max(b.limit.values())) * 1e9)
    bound = max(resident_s, pinned_copy_s)
    table = [
        {"what": "data resident on the GPU", "ms": 1e3 * resident_s},
        {"what": "pinned copy of the batch (limit)", "ms": 1e3 * pinned_copy_s},
        {
            "what": "theano_queue, registered dataset",
            "ms": 1e3 * results["registered"],
            "x max": results["registered"] / bound,
        },
        {"what": "theano_queue, numpy batches", "ms": 1e3 * results["numpy"], "x max": results["numpy"] / bound},
        {"what": "theano.function given numpy", "ms": 1e3 * numpy_s, "x max": numpy_s / bound},
    ]
    return {
        "rows": table,
        "batch": [rows, cols],
        "hidden": hidden,
        "target": "<= 1.05 x max(resident step, pinned copy)",
        "met": max(results.values()) / bound <= 1.05,
        "headline": "queue-fed step %.3f x (registered) / %.3f x (numpy) max(resident, pinned copy); "
        "numpy input %.2f x" % (results["registered"] / bound, results["numpy"] / bound, numpy_s / bound),
    }


# ---- 4 -------------------------------------------------------------------------------


@scenario(4, "Compute-bound: overhead against data already resident")
def compute_bound(b):
    rows, cols = 1024, 4096
    steps = 10 if b.quick else 40
    dataset = b.rng.standard_normal((4 * rows, cols)).astype("float32")

    def heavy(x):
        h = x
        rng = np.random.default_rng(3)
        for _ in range(4):
            w = theano.shared((rng.standard_normal((cols, cols)) / np.sqrt(cols)).astype("float32"))
            h = T.tanh(T.dot(h, w))
        return h.mean()

    q = tq.Queue([("x", "float32", (rows, cols))], capacity=3, name="compute")
    resident = reading(theano.function([], heavy(theano.shared(dataset[:rows]))))
    fed = reading(theano.function([], heavy(q.dequeue())))
    resident_s = best_of(lambda: time_steps(resident, steps))
    with tq.Feeder(q, cycle([dataset[i * rows : (i + 1) * rows].copy() for i in range(4)]), close_when_done=False):
        fed_s = best_of(lambda: time_steps(fed, steps))
    q.close(cancel_pending=True)
    overhead = fed_s / resident_s - 1
    return {
        "rows": [
            {"what": "resident", "ms": 1e3 * resident_s},
            {"what": "queue-fed", "ms": 1e3 * fed_s, "overhead %": 100 * overhead},
        ],
        "target": "<= 2 %",
        "met": overhead <= 0.02,
        "headline": "overhead %.2f %%" % (100 * overhead),
    }


# ---- 5 and 9 --------------------------------------------------------------------------


def dequeue_overhead_us(target, calls):
    """Per-call time of a function that dequeues a small ready batch, minus the same on resident data."""
    rows, cols = 64, 32
    q = tq.Queue([("x", "float32", (rows, cols))], capacity=calls + 8, target=target, name="small")
    batch = np.ones((rows, cols), "float32")
    # The baseline's data lives where the queue does (a plain shared variable would go to the GPU).
    if target == "cpu":  # keep both on the host even when Theano runs on a GPU
        shared, mode = theano.tensor._shared(batch), theano.compile.get_default_mode().excluding("gpuarray")
    else:
        shared, mode = theano.shared(batch), None
    resident = theano.function([], shared.sum(), mode=mode)
    fed = theano.function([], q.dequeue().sum(), mode=mode)

    def fed_calls():
        for _ in range(calls + 3):
            q.put(batch)
        return time_steps(fed, calls)

    fed_s = best_of(fed_calls)
    resident_s = best_of(lambda: time_steps(resident, calls))
    return 1e6 * fed_s, 1e6 * resident_s


@scenario(5, "Small batches: host overhead per dequeue")
def small_batches(b):
    fed_us, resident_us = dequeue_overhead_us(None, 500 if b.quick else 2000)
    overhead = fed_us - resident_us
    return {
        "rows": [
            {"what": "function on resident data", "us/call": resident_us},
            {"what": "function that dequeues a ready batch", "us/call": fed_us, "dequeue overhead us": overhead},
        ],
        "target": "<= 20 us",
        "met": overhead <= 20,
        "headline": "%.1f us per dequeue" % overhead,
    }


@scenario(9, "CPU target: dequeue overhead and host copy throughput", needs_gpu=False)
def cpu_target(b):
    fed_us, resident_us = dequeue_overhead_us("cpu", 500 if b.quick else 2000)
    mib = 16 if b.quick else 64
    src = b.rng.standard_normal(mib * MiB // 8)
    dst = np.empty_like(src)
    q = tq.Queue([("x", "float64", src.shape)], capacity=2, target="cpu", name="copy")

    def put_then_take():
        started = time.perf_counter()
        q.put(src)
        elapsed = time.perf_counter() - started
        q.get()
        return elapsed

    put_s = best_of(lambda: min(put_then_take() for _ in range(5)))
    memcpy_s = best_of(lambda: time_steps(lambda: np.copyto(dst, src), 5, warmup=1))
    return {
        "rows": [
            {"what": "function on resident data", "us/call": resident_us},
            {
                "what": "function that dequeues a ready batch",
                "us/call": fed_us,
                "dequeue overhead us": fed_us - resident_us,
            },
            {"what": "plain memcpy (np.copyto)", "GB/s": mib * MiB / memcpy_s / 1e9},
            {
                "what": "Queue.put (copy threads: %d)" % _engine.copy_threads(),
                "GB/s": mib * MiB / put_s / 1e9,
                "x memcpy": memcpy_s / put_s,
            },
        ],
        "headline": "%.1f us per dequeue; put copies at %.2f x memcpy" % (fed_us - resident_us, memcpy_s / put_s),
    }


# ---- 6 -------------------------------------------------------------------------------


@scenario(6, "Peer: PyTorch DataLoader(pin_memory=True) with a CUDA-stream prefetcher", needs=(3,))
def peer(b):
    args = ["--sizes", ",".join(map(str, b.sizes_mib()))]
    args += ["--balanced", "%d,%d,%d" % (b.balanced["rows"], b.balanced["cols"], b.balanced["width"])]
    out, why = run_torch_peer(b.args.torch_python, "torch_peer", args + (["--quick"] if b.quick else []), 900)
    if why:
        return {"skipped": why}
    torch = json.loads(out.strip().splitlines()[-1])
    ours = {(r["MiB"], r["source"]): r["GB/s"] for r in b.transfer}
    rows = []
    for t in torch["transfer"]:
        rows.append(
            {
                "workload": "transfer-bound %d MiB" % t["MiB"],
                "PyTorch GB/s": t["GB/s"],
                "PyTorch workers": t["workers"],
                "theano_queue GB/s (numpy)": ours[(t["MiB"], "numpy")],
                "ours / theirs": ours[(t["MiB"], "numpy")] / t["GB/s"],
            }
        )
    tb = torch["balanced"]
    rows.append(
        {
            "workload": "balanced %dx%d, width %d" % (b.balanced["rows"], b.balanced["cols"], b.balanced["width"]),
            "PyTorch step ms": 1e3 * tb["both_s"],
            "PyTorch compute ms": 1e3 * tb["compute_s"],
            "PyTorch transfer ms": 1e3 * tb["transfer_s"],
            "theano_queue step ms": 1e3 * b.balanced["both_s"],
            "theirs / ours (step)": tb["both_s"] / b.balanced["both_s"],
        }
    )
    worst = min(r["ours / theirs"] for r in rows[:-1])
    step_gain = tb["both_s"] / b.balanced["both_s"]
    return {
        "rows": rows,
        "torch": torch["versions"],
        "target": "theano_queue at least matches PyTorch (within 5 %, the run-to-run spread of the limit itself)",
        "met": worst >= 0.95 and step_gain >= 0.95,
        "headline": "transfer-bound: theano_queue %.1f x PyTorch's GB/s or more; balanced step %.1f x faster"
        % (worst, step_gain),
    }


# ---- 7 -------------------------------------------------------------------------------


@scenario(7, "uint8 over the bus, converted on the GPU, against float32 over the bus")
def uint8_images(b):
    samples = 256 if b.quick else 1024
    cols = 3 * 64 * 64
    f32_s = queue_throughput(b, samples, cols, "numpy", "float32", convert=True)
    u8_s = queue_throughput(b, samples, cols, "numpy", "uint8", convert=True)
    return {
        "rows": [
            {"what": "float32 over the bus", "samples/s": samples / f32_s},
            {
                "what": "uint8 over the bus, to float32 /255 on the GPU",
                "samples/s": samples / u8_s,
                "gain": f32_s / u8_s,
            },
        ],
        "batch": "%d images of 3x64x64, then dot with a vector" % samples,
        "headline": "uint8 gives %.2f x the samples/s of float32" % (f32_s / u8_s),
    }


# ---- 8 -------------------------------------------------------------------------------


@scenario(8, "Loss read back every step against every 100 steps")
def read_every(b):
    from bench import keepup

    args = argparse.Namespace(rows=4096, cols=1024, hidden=1024, steps=100 if b.quick else 300, capacity=3)
    rows = [keepup.run(every, args, b.rng) for every in (1, 100)]
    worst_wait = max(r["model_waited_fraction"] for r in rows)
    return {
        "rows": rows,
        "target": "the queue stays full in both",
        "met": worst_wait <= 0.02,
        "headline": "model waited %.1f %% / %.1f %% of the time; mean fill %.2f / %.2f of 3"
        % (
            100 * rows[0]["model_waited_fraction"],
            100 * rows[1]["model_waited_fraction"],
            rows[0]["mean_fill"],
            rows[1]["mean_fill"],
        ),
    }
