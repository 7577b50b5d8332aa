"""Regenerate doc/benchmarks.rst: theano_queue next to the PCIe limit and to the alternatives.

    make bench                         # on the machine at hand (GPU scenarios need Theano on a GPU)
    python bench/run.py --quick        # smaller sizes, for a smoke test
    python bench/run.py --only 11,12   # the worker-process scenarios (bench/workers_bench.py)
    python bench/run.py --only 13,14,15,16   # in-memory datasets (bench/arrays_bench.py)
    python bench/run.py --only 17        # device-array puts (bench/device_put_bench.py)
    python bench/run.py --only 18 --merge    # variable-length sequences (bench/varlen_bench.py), added to
                                             # the scenarios already in doc/bench/results.json
    python bench/run.py --only 19 --merge    # small steps (bench/step_profile.py), into the existing results

Every scenario is measured in this one run and reported as ratios of numbers
measured side by side.  The results go to doc/bench/results.json; the table and
the chart are rendered from it by bench/report.py (run at the end, or later).
"""
import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time

import numpy as np
import theano
import theano.tensor as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import theano_queue as tq  # noqa: E402
from common import MiB, best_of, cycle, layer, mlp_train_step, reading, slices, time_steps  # noqa: E402
from theano_queue import _engine  # noqa: E402
from theano_queue.probe import h2d_seconds  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class Bench:
    """Shared state of one run: sizes, the GPU context, results of earlier scenarios."""

    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.rng = np.random.default_rng(0)
        self.results = {}
        self.on_gpu = tq.Queue([("x", "float32", (1,))]).on_gpu
        if self.on_gpu:
            from theano.gpuarray.type import get_context

            self.context = get_context(None)

    def sizes_mib(self):
        return [4, 16] if self.quick else [4, 16, 64, 256]

    def steps_for(self, nbytes, total_mib=2048, least=8):
        total = 256 if self.quick else total_mib
        return max(least, int(total * MiB / nbytes))


def scenario(number, title, needs_gpu=True):
    def register(fn):
        fn.number, fn.title, fn.needs_gpu = number, title, needs_gpu
        return fn

    return register


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
    rows.append({"MiB": mib, "device-to-device GB/s": mib * MiB / d2d / 1e9,
                 "PCIe time / D2D time": (mib * MiB / b.limit[mib] / 1e9) / d2d})
    return {"rows": rows,
            "headline": "pinned H2D %.1f GB/s at %d MiB; a slot's D2D copy costs 1/%.0f of its PCIe trip"
                        % (b.limit[max(b.limit)], max(b.limit), rows[-1]["PCIe time / D2D time"])}


# ---- 2 -------------------------------------------------------------------------------


def queue_throughput(b, rows, cols, source_kind, dtype="float32", convert=False):
    """Seconds per element through a queue into a graph that reads one value back.

    With convert, the graph first turns the whole batch into float32 in [0, 1]
    and multiplies it by a vector (a first layer's worth of reading it; a
    full reduction would cost Theano more than the transfer).
    """
    itemsize = np.dtype(dtype).itemsize
    nbytes = rows * cols * itemsize
    pool = 4 if nbytes >= 64 * MiB else 8
    data = (b.rng.standard_normal((pool * rows, cols)) * 50).astype(dtype)
    q = tq.Queue([("x", dtype, (rows, cols))], capacity=3, name="throughput")
    x = q.dequeue()
    if convert:
        probe = theano.shared(np.ones(cols, "float32"))
        out = T.dot(T.cast(x, "float32") / np.float32(255), probe)[0]
    else:
        out = x[0, 0]
    f = reading(theano.function([], out))
    steps = b.steps_for(nbytes)
    if source_kind == "registered":
        q.register_host(data)
        source = slices(data, rows)
    else:
        source = cycle([data[i * rows:(i + 1) * rows].copy() for i in range(pool)])
    with tq.Feeder(q, source, close_when_done=False):
        seconds = best_of(lambda: time_steps(f, steps), 2)
    q.close(cancel_pending=True)
    if source_kind == "registered":
        q.unregister_host(data)
    return seconds


@scenario(2, "Transfer-bound: effective bandwidth through the queue")
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
    return {"rows": rows_out, "target": ">= 0.90 x limit", "met": min(worst.values()) >= 0.90,
            "headline": "numpy batches >= %.2f x limit, registered >= %.2f x limit" % (worst["numpy"],
                                                                                     worst["registered"])}


# ---- 3 -------------------------------------------------------------------------------


@scenario(3, "Balanced: compute about equal to transfer, and the baselines")
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
    host_batches = [dataset[i * rows:(i + 1) * rows].copy() for i in range(4)]
    numbered = iter(cycle(host_batches))

    # The shared-variable idiom: load a chunk, then index minibatches from it.
    chunk = theano.shared(np.concatenate(host_batches[:2]))
    index = T.lscalar("index")
    weights_rng = np.random.default_rng(1)
    from_chunk = theano.function([index], layer(chunk[index * rows:(index + 1) * rows], cols, width, weights_rng))

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
    b.balanced = {"rows": rows, "cols": cols, "width": width, "transfer_s": transfer_s, "compute_s": compute_s,
                  "both_s": both_s}
    ratio = both_s / max(compute_s, transfer_s)
    table = [
        {"what": "transfer alone (queue)", "ms": 1e3 * transfer_s},
        {"what": "compute alone (resident)", "ms": 1e3 * compute_s},
        {"what": "theano_queue: both", "ms": 1e3 * both_s, "x max": ratio},
        {"what": "theano.function given numpy", "ms": 1e3 * numpy_s, "x max": numpy_s / max(compute_s, transfer_s)},
        {"what": "shared-variable idiom (2 batches a chunk)", "ms": 1e3 * shared_s,
         "x max": shared_s / max(compute_s, transfer_s)},
    ]
    return {"rows": table, "batch": [rows, cols], "MiB": nbytes / MiB, "layer_width": width,
            "target": "<= 1.05 x max(compute, transfer)", "met": ratio <= 1.05,
            "headline": "step = %.3f x max(compute, transfer); numpy input %.2f x, shared idiom %.2f x"
                        % (ratio, table[3]["x max"], table[4]["x max"])}


@scenario(3.5, "Balanced: 3-layer MLP training step on 128 MiB batches")
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
    host_batches = [dataset[i * rows:(i + 1) * rows].copy() for i in range(3)]
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
        {"what": "theano_queue, registered dataset", "ms": 1e3 * results["registered"],
         "x max": results["registered"] / bound},
        {"what": "theano_queue, numpy batches", "ms": 1e3 * results["numpy"], "x max": results["numpy"] / bound},
        {"what": "theano.function given numpy", "ms": 1e3 * numpy_s, "x max": numpy_s / bound},
    ]
    return {"rows": table, "batch": [rows, cols], "hidden": hidden,
            "target": "<= 1.05 x max(resident step, pinned copy)", "met": max(results.values()) / bound <= 1.05,
            "headline": "queue-fed step %.3f x (registered) / %.3f x (numpy) max(resident, pinned copy); "
                        "numpy input %.2f x" % (results["registered"] / bound, results["numpy"] / bound,
                                                numpy_s / bound)}


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
    with tq.Feeder(q, cycle([dataset[i * rows:(i + 1) * rows].copy() for i in range(4)]), close_when_done=False):
        fed_s = best_of(lambda: time_steps(fed, steps))
    q.close(cancel_pending=True)
    overhead = fed_s / resident_s - 1
    return {"rows": [{"what": "resident", "ms": 1e3 * resident_s}, {"what": "queue-fed", "ms": 1e3 * fed_s,
                                                                    "overhead %": 100 * overhead}],
            "target": "<= 2 %", "met": overhead <= 0.02, "headline": "overhead %.2f %%" % (100 * overhead)}


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
    return {"rows": [{"what": "function on resident data", "us/call": resident_us},
                     {"what": "function that dequeues a ready batch", "us/call": fed_us,
                      "dequeue overhead us": overhead}],
            "target": "<= 20 us", "met": overhead <= 20, "headline": "%.1f us per dequeue" % overhead}


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
    return {"rows": [{"what": "function on resident data", "us/call": resident_us},
                     {"what": "function that dequeues a ready batch", "us/call": fed_us,
                      "dequeue overhead us": fed_us - resident_us},
                     {"what": "plain memcpy (np.copyto)", "GB/s": mib * MiB / memcpy_s / 1e9},
                     {"what": "Queue.put (copy threads: %d)" % _engine.copy_threads(),
                      "GB/s": mib * MiB / put_s / 1e9, "x memcpy": memcpy_s / put_s}],
            "headline": "%.1f us per dequeue; put copies at %.2f x memcpy"
                        % (fed_us - resident_us, memcpy_s / put_s)}


# ---- 6 -------------------------------------------------------------------------------


@scenario(6, "Peer: PyTorch DataLoader(pin_memory=True) with a CUDA-stream prefetcher")
def peer(b):
    command = shlex.split(b.args.torch_python) + [os.path.join(HERE, "torch_peer.py"),
                                                   "--sizes", ",".join(map(str, b.sizes_mib())),
                                                   "--balanced", "%d,%d,%d" % (b.balanced["rows"], b.balanced["cols"],
                                                                                b.balanced["width"])]
    if b.quick:
        command.append("--quick")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        return {"skipped": "PyTorch peer did not run: %s" % done.stderr.strip()[-500:]}
    torch = json.loads(done.stdout.strip().splitlines()[-1])
    ours = {(r["MiB"], r["source"]): r["GB/s"] for r in b.transfer}
    rows = []
    for t in torch["transfer"]:
        rows.append({"workload": "transfer-bound %d MiB" % t["MiB"], "PyTorch GB/s": t["GB/s"],
                     "PyTorch workers": t["workers"], "theano_queue GB/s (numpy)": ours[(t["MiB"], "numpy")],
                     "ours / theirs": ours[(t["MiB"], "numpy")] / t["GB/s"]})
    tb = torch["balanced"]
    rows.append({"workload": "balanced %dx%d, width %d" % (b.balanced["rows"], b.balanced["cols"],
                                                           b.balanced["width"]),
                 "PyTorch step ms": 1e3 * tb["both_s"], "PyTorch compute ms": 1e3 * tb["compute_s"],
                 "PyTorch transfer ms": 1e3 * tb["transfer_s"], "theano_queue step ms": 1e3 * b.balanced["both_s"],
                 "theirs / ours (step)": tb["both_s"] / b.balanced["both_s"]})
    worst = min(r["ours / theirs"] for r in rows[:-1])
    step_gain = tb["both_s"] / b.balanced["both_s"]
    return {"rows": rows, "torch": torch["versions"],
            "target": "theano_queue at least matches PyTorch (within 5 %, the run-to-run spread of the limit itself)",
            "met": worst >= 0.95 and step_gain >= 0.95,
            "headline": "transfer-bound: theano_queue %.1f x PyTorch's GB/s or more; balanced step %.1f x faster"
                        % (worst, step_gain)}


# ---- 7 -------------------------------------------------------------------------------


@scenario(7, "uint8 over the bus, converted on the GPU, against float32 over the bus")
def uint8_images(b):
    samples = 256 if b.quick else 1024
    cols = 3 * 64 * 64
    f32_s = queue_throughput(b, samples, cols, "numpy", "float32", convert=True)
    u8_s = queue_throughput(b, samples, cols, "numpy", "uint8", convert=True)
    return {"rows": [{"what": "float32 over the bus", "samples/s": samples / f32_s},
                     {"what": "uint8 over the bus, to float32 /255 on the GPU", "samples/s": samples / u8_s,
                      "gain": f32_s / u8_s}],
            "batch": "%d images of 3x64x64, then dot with a vector" % samples,
            "headline": "uint8 gives %.2f x the samples/s of float32" % (f32_s / u8_s)}


# ---- 8 -------------------------------------------------------------------------------


@scenario(8, "Loss read back every step against every 100 steps")
def read_every(b):
    import keepup

    args = argparse.Namespace(rows=4096, cols=1024, hidden=1024, steps=100 if b.quick else 300, capacity=3)
    rows = [keepup.run(every, args, b.rng) for every in (1, 100)]
    worst_wait = max(r["model_waited_fraction"] for r in rows)
    return {"rows": rows, "target": "the queue stays full in both", "met": worst_wait <= 0.02,
            "headline": "model waited %.1f %% / %.1f %% of the time; mean fill %.2f / %.2f of 3"
                        % (100 * rows[0]["model_waited_fraction"], 100 * rows[1]["model_waited_fraction"],
                           rows[0]["mean_fill"], rows[1]["mean_fill"])}


# ---- 10 ------------------------------------------------------------------------------


@scenario(10, "Monitor and trace: what watching costs the training step", needs_gpu=False)
def observe_cost(b):
    """A fed MLP step alone, under tq.monitor (default and 10x faster sampling) and while a trace records."""
    import contextlib
    import io

    from report import cost_with_spread

    # About 1 ms per step on the H200; a CPU gets a smaller model of about the same step time.
    rows, cols, hidden = (2048, 1024, 1024) if b.on_gpu else (256, 256, 256)
    steps = 200 if b.quick else 1000
    q = tq.Queue([("x", "float32", (rows, cols)), ("y", "int32", (rows,))], capacity=3, name="observed")
    x, y = q.dequeue()
    loss, updates = mlp_train_step(x, y, cols, hidden, 10, b.rng)
    step = reading(theano.function([], loss, updates=updates))
    batches = [(b.rng.standard_normal((rows, cols)).astype("float32"), b.rng.integers(0, 10, rows).astype("int32"))
               for _ in range(4)]
    monitors = []

    def monitor(interval):
        monitors.append(tq.monitor(q, interval=interval, file=io.StringIO()))
        return monitors[-1]

    watchers = {
        "nothing": contextlib.nullcontext,
        "tq.monitor, 0.5 s interval (default)": lambda: monitor(0.5),
        "tq.monitor, 0.05 s interval": lambda: monitor(0.05),
        "q.trace recording every step": lambda: q.trace(steps=steps + 10),
    }

    def measure(watch):
        with tq.Feeder(q, cycle(batches), close_when_done=False):
            with watch():
                seconds = time_steps(step, steps)
        q.close(cancel_pending=True)
        q.reopen()
        return seconds

    # Interleaved rounds, each variant against the unwatched step of its own round: drifts of the
    # machine hit every variant alike, and the median of the rounds ignores the odd disturbed one.
    costs = {name: [] for name in watchers}
    base_times = []
    for _ in range(3 if b.quick else 7):
        times = {name: measure(watch) for name, watch in watchers.items()}
        base_times.append(times["nothing"])
        for name in watchers:
            costs[name].append(100 * (times[name] / times["nothing"] - 1))
    base = float(np.median(base_times))
    per_sample_us = 1e6 * sum(m.sample_seconds for m in monitors) / max(1, sum(m.samples for m in monitors))
    rows_out = [{"watching": name, "median cost %": float(np.median(c)), "spread of rounds %": float(np.ptp(c))}
                for name, c in costs.items() if name != "nothing"]
    rows_out.append({"watching": "one monitor sample (stats, tqdm refresh), us", "us": per_sample_us,
                     "share of time at 0.5 s %": 100 * per_sample_us / 0.5e6})
    monitor_cost = rows_out[0]["median cost %"]
    return {"rows": rows_out, "batch": [rows, cols], "step_ms": 1e3 * base,
            "target": "the default monitor costs <= 1 % of the step", "met": monitor_cost <= 1,
            "headline": "monitor %s (0.5 s), %s (0.05 s); trace recording %s of a %.2f ms step; a sample takes "
                        "%.0f us" % tuple([cost_with_spread(c) for name, c in costs.items() if name != "nothing"]
                                          + [1e3 * base, per_sample_us])}


# ---- 11 and 12 -------------------------------------------------------------------------


@scenario(11, "Per-sample CPU-heavy pipeline: worker processes against PyTorch's DataLoader", needs_gpu=False)
def cpu_heavy_pipeline(b):
    import workers_bench

    return workers_bench.cpu_heavy(b)


@scenario(12, "Large samples, cheap decode: worker processes against the pinned host-to-device limit",
          needs_gpu=False)
def large_samples(b):
    import workers_bench

    return workers_bench.large_samples(b)


# ---- 13-16: in-memory datasets (bench/arrays_bench.py) --------------------------------

import arrays_bench  # noqa: E402


@scenario(13, "CPU target: a 64 MiB dequeue (lent) against theano.function given the array", needs_gpu=False)
def cpu_handoff(b):
    return arrays_bench.cpu_handoff(b)


@scenario(14, "Host memory bandwidth, PCIe, and the bound they set on copied numpy batches", needs_gpu=False)
def copy_bound(b):
    return arrays_bench.copy_bound(b)


@scenario(15, "Shuffled minibatches from an in-RAM array dataset (host gather, batch copy, default)", needs_gpu=False)
def array_dataset(b):
    return arrays_bench.shuffled_minibatches(b)


@scenario(16, "The Theano experts' idiom: the dataset in a shared variable, indexed by minibatch", needs_gpu=False)
def experts_idiom(b):
    return arrays_bench.experts_idiom(b)


# ---- 17: device arrays put from host code (bench/device_put_bench.py) ---------------------


@scenario(17, "Device-array producer: puts from GPU memory against the device-to-device copy rate")
def device_producer(b):
    import device_put_bench

    return device_put_bench.device_producer(b)


# ---- 18: variable-length sequences (bench/varlen_bench.py) -----------------------------


@scenario(18, "Variable-length sequences (lognormal up to 512): bytes over the bus and step time against padding to "
              "the bound", needs_gpu=False)
def variable_length(b):
    import varlen_bench

    return varlen_bench.sequences(b)


# ---- 19: small steps (bench/step_profile.py) ------------------------------------------


@scenario(19, "Small steps: an MLP step fed from an array dataset and from a Python iterable, against resident",
          needs_gpu=False)
def small_steps(b):
    import step_profile

    shapes = [(256, 784), (64, 3072)]
    steps, rounds = (50, 2) if b.quick else (300, 7)
    # A GPU runs the MLP in about 0.2 ms; a processor needs a narrower one for a step as small.
    hidden = 1024 if b.on_gpu else 64
    table, ratios, profiles = [], {}, []
    for batch, cols in shapes:
        result = step_profile.profile(batch, cols, hidden=hidden, steps=steps, rounds=rounds)
        profiles.append(result["producer us/batch"])
        for row in result["rows"]:
            table.append(dict({"step": result["shape"]}, **row))
        for part in ("array", "iterable"):
            ratios["%s %s" % (result["shape"], part)] = result["ratios"][part]
    worst = max(ratios.values())
    return {"rows": table, "ratios": ratios, "hidden": hidden,
            "producer us/batch": dict(zip(["%dx%d" % s for s in shapes], profiles)),
            "target": "<= 1.05 x resident (array dataset and Python iterable, both shapes)", "met": worst <= 1.05,
            "headline": "x resident: " + ", ".join("%s %.3f" % kv for kv in ratios.items())}


SCENARIOS = [limit, transfer_bound, balanced, mlp, compute_bound, small_batches, peer, uint8_images, read_every,
             cpu_target, observe_cost, cpu_heavy_pipeline, large_samples, cpu_handoff, copy_bound, array_dataset,
             experts_idiom, device_producer, variable_length, small_steps]


def machine_name():
    """The processor, its cores and the GPUs, as this machine reports them."""
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        gpus = []
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return "%s (%d cores), %s" % (cpu, os.cpu_count(), ", ".join(gpus) or "no GPU")


def merged(path, run):
    """The results in path with this run's scenarios in place of theirs (and added), in scenario order."""
    with open(path) as f:
        old = json.load(f)
    fresh = {s["number"]: s for s in run["scenarios"]}
    kept = [s for s in old["scenarios"] if s["number"] not in fresh]
    old["scenarios"] = sorted(kept + list(fresh.values()), key=lambda s: float(s["number"]))
    old.setdefault("merged", []).append({"command": run["command"], "date": run["date"], "machine": run["machine"],
                                         "scenarios": sorted(fresh)})
    return old


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not figures")
    parser.add_argument("--only", default="", help="comma-separated scenario numbers")
    parser.add_argument("--out", default=os.path.join(ROOT, "doc", "bench", "results.json"))
    parser.add_argument("--torch-python", default="python3", help="a Python with PyTorch, for scenario 6")
    parser.add_argument("--no-report", action="store_true", help="write the JSON only")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other scenarios of the existing results file (with --only)")
    args = parser.parse_args(argv)
    only = {float(n) for n in args.only.split(",") if n}

    b = Bench(args)
    run = {"machine": machine_name(), "device": theano.config.device, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                              time.gmtime()),
           "command": " ".join([sys.executable, "bench/run.py"] + list(argv if argv is not None else sys.argv[1:])),
           "copy_threads": _engine.copy_threads(), "scenarios": []}
    for fn in SCENARIOS:
        if only and fn.number not in only and int(fn.number) not in only:
            continue
        entry = {"number": fn.number, "title": fn.title}
        if fn.needs_gpu and not b.on_gpu:
            entry["skipped"] = "needs Theano on a GPU"
        else:
            started = time.perf_counter()
            try:
                entry.update(fn(b))
            except Exception as exc:  # one broken scenario must not hide the others' figures
                entry["error"] = "%s: %s" % (type(exc).__name__, exc)
            entry["seconds"] = time.perf_counter() - started
        run["scenarios"].append(entry)
        print("[%s] %s: %s" % (fn.number, fn.title, entry.get("headline") or entry.get("skipped")
                               or entry.get("error")), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    if args.merge and os.path.exists(args.out):
        run = merged(args.out, run)
    with open(args.out, "w") as f:
        json.dump(run, f, indent=1)
    print("wrote", args.out)
    if not args.no_report:
        import report

        report.main([args.out])
    return run


if __name__ == "__main__":
    main()
