"""Regenerate doc/benchmarks.rst: theano_queue next to the PCIe limit and to the alternatives.

    make bench                         # on the machine at hand (GPU scenarios need Theano on a GPU)
    python bench/run.py --quick        # smaller sizes, for a smoke test
    python bench/run.py --only 11,12   # the worker-process scenarios (bench/workers_bench.py)
    python bench/run.py --only 13,14,15,16   # in-memory datasets (bench/arrays_bench.py)
    python bench/run.py --only 17        # device-array puts (bench/device_put_bench.py)
    python bench/run.py --only 18 --merge    # variable-length sequences (bench/varlen_bench.py), added to
                                             # the scenarios already in doc/bench/results.json
    python bench/run.py --only 19 --merge    # small steps (bench/step_profile.py), into the existing results
    python bench/run.py --only 20 --merge    # the user's own generator (bench/generator_step.py)
    python bench/run.py --only 22 --merge    # an array dataset held in GPU memory (bench/held_bench.py)
    python bench/run.py --only 26 --merge    # cast and strided array datasets (bench/layouts_bench.py)
    python bench/run.py --only 32 --merge    # Lasagne's MNIST MLP against its own loop (bench/lasagne_mlp.py)
    python bench/run.py --only 33 --merge    # Keras's MLP from the queue against its own fit (bench/keras_bench.py)
    python bench/run.py --only 44 --merge    # auto against a sweep of fixed settings (bench/auto_bench.py)
    bash scripts/gpu_record.sh a 1,2,3,3.5,6 4 5    # a record measured over several calls of one machine
    bash scripts/gpu_record.sh b 19 20              # (each call a part), joined into doc/bench/results.json:
    python bench/run.py --join a.json b.json

Every scenario is measured in this one run and reported as ratios of numbers
measured side by side.  The results go to doc/bench/results.json; the table and
the chart are rendered from it by bench/report.py (run at the end, or later).
"""

if __name__ == "__main__" and not __package__:
    # `python bench/run.py` (the command of the docs, `make bench` and `theano-queue bench`) runs this module
    # as `python -m bench.run` does, from the checkout's root: the one place the package is found by path.
    import os
    import runpy
    import sys

    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runpy.run_module("bench.run", run_name="__main__", alter_sys=True)
    sys.exit(0)

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import theano

import theano_queue as tq
from bench.common import cycle, mlp_train_step, reading, run_torch_peer, time_steps
from bench.record import joined, merged, write_record
from bench.scenario import Bench, scenario
from bench.transfer_scenarios import (
    balanced,
    compute_bound,
    cpu_target,
    limit,
    mlp,
    peer,
    read_every,
    small_batches,
    transfer_bound,
    uint8_images,
)
from theano_queue import _engine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---- 10 ------------------------------------------------------------------------------


@scenario(10, "Monitor and trace: what watching costs the training step", needs_gpu=False)
def observe_cost(b):
    """A fed MLP step alone, under tq.monitor (default and 10x faster sampling) and while a trace records."""
    import contextlib
    import io

    from bench.report import cost_with_spread

    # About 1 ms per step on the H200; a CPU gets a smaller model of about the same step time.
    rows, cols, hidden = (2048, 1024, 1024) if b.on_gpu else (256, 256, 256)
    steps = 200 if b.quick else 1000
    q = tq.Queue([("x", "float32", (rows, cols)), ("y", "int32", (rows,))], capacity=3, name="observed")
    x, y = q.dequeue()
    loss, updates = mlp_train_step(x, y, cols, hidden, 10, b.rng)
    step = reading(theano.function([], loss, updates=updates))
    batches = [
        (b.rng.standard_normal((rows, cols)).astype("float32"), b.rng.integers(0, 10, rows).astype("int32"))
        for _ in range(4)
    ]
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
    rows_out = [
        {"watching": name, "median cost %": float(np.median(c)), "spread of rounds %": float(np.ptp(c))}
        for name, c in costs.items()
        if name != "nothing"
    ]
    rows_out.append(
        {
            "watching": "one monitor sample (stats, tqdm refresh), us",
            "us": per_sample_us,
            "share of time at 0.5 s %": 100 * per_sample_us / 0.5e6,
        }
    )
    monitor_cost = rows_out[0]["median cost %"]
    return {
        "rows": rows_out,
        "batch": [rows, cols],
        "step_ms": 1e3 * base,
        "target": "the default monitor costs <= 1 % of the step",
        "met": monitor_cost <= 1,
        "headline": "monitor %s (0.5 s), %s (0.05 s); trace recording %s of a %.2f ms step; a sample takes %.0f us"
        % tuple([cost_with_spread(c) for name, c in costs.items() if name != "nothing"] + [1e3 * base, per_sample_us]),
    }


# ---- 11 and 12 -------------------------------------------------------------------------


@scenario(11, "Per-sample CPU-heavy pipeline: worker processes against PyTorch's DataLoader", needs_gpu=False)
def cpu_heavy_pipeline(b):
    from bench import workers_bench

    return workers_bench.cpu_heavy(b)


@scenario(12, "Large samples, cheap decode: worker processes against the pinned host-to-device limit", needs_gpu=False)
def large_samples(b):
    from bench import workers_bench

    return workers_bench.large_samples(b)


# ---- 13-16: in-memory datasets (bench/arrays_bench.py) --------------------------------

from bench import arrays_bench  # noqa: E402


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
    from bench import device_put_bench

    return device_put_bench.device_producer(b)


# ---- 18: variable-length sequences (bench/varlen_bench.py) -----------------------------


@scenario(
    18,
    "Variable-length sequences (lognormal up to 512): bytes over the bus and step time against padding to the bound",
    needs_gpu=False,
)
def variable_length(b):
    from bench import varlen_bench

    return varlen_bench.sequences(b)


# ---- 19: small steps (bench/step_profile.py) ------------------------------------------


#: Scenario 19's floors (bench/step_floor.py): the key each is reported under, and its part.
SMALL_STEP_FLOORS = {
    "upload floor": "resident + upload, wait, record",
    "host copy floor": "resident + host copy, upload, wait, record",
    "Python copy floor": "resident + Python copy, upload, wait, record",
}
#: Each fed part's own floor: a producer of its kind beside the resident step with no queue (held: the
#: dataset sliced in the graph, the Theano idiom that a held dataset replaces).
PART_FLOORS = {
    "array": SMALL_STEP_FLOORS["host copy floor"],
    "held": "resident, sliced",
    "iterable": SMALL_STEP_FLOORS["Python copy floor"],
}


@scenario(
    19,
    "Small steps: an MLP step fed from an array dataset, a held one and a Python iterable, against resident",
    needs_gpu=False,
)
def small_steps(b):
    from bench import step_profile

    # Issue 43's rows: 256x784 with hidden 256 and 500x784 with hidden 16, each about 0.25 ms on a GPU; a
    # processor needs a narrower MLP for steps as small.
    shapes = [(256, 784, 256), (500, 784, 16)] if b.on_gpu else [(256, 784, 64), (500, 784, 16)]
    steps, rounds = (50, 2) if b.quick else (300, 7)
    targets = {"array": 1.05, "held": 1.05, "iterable": 1.10}
    table, ratios, over_floor, profiles = [], {}, {}, []
    floors = {key: {} for key in SMALL_STEP_FLOORS}
    for batch, cols, hidden in shapes:
        result = step_profile.profile(
            batch, cols, hidden=hidden, steps=steps, rounds=rounds, switch_intervals=(), floor=True
        )
        profiles.append(result["producer us/batch"])
        # The median of each round's ratio to its own resident step: the machine's drift cancels.
        x = {row["part"]: row["x resident, paired"] for row in result["rows"]}
        for row in result["rows"]:
            table.append(dict({"step": result["shape"], "hidden": hidden}, **row))
        for part in targets:
            name = "%s %s" % (result["shape"], part)
            if x[part] == x[part]:  # held: on a GPU only
                ratios[name] = x[part]
            if x[part] == x[part] and x[PART_FLOORS[part]] == x[PART_FLOORS[part]]:  # the calls': on a GPU only
                over_floor[name] = x[part] / x[PART_FLOORS[part]]
        for key, part in SMALL_STEP_FLOORS.items():
            floors[key][result["shape"]] = x[part]
    peer = torch_small_steps(b, shapes, steps, rounds) if b.on_gpu else {}
    table += peer.get("rows", [])
    met = all(v <= targets[k.split()[1]] for k, v in ratios.items())
    headline = "x resident: " + ", ".join("%s %.3f" % kv for kv in ratios.items())
    if b.on_gpu:
        for key, words in (
            ("upload floor", "floor (the upload's calls, no queue)"),
            ("host copy floor", "with the host copy beside"),
            ("Python copy floor", "with a Python copy beside"),
        ):
            headline += "; %s: %s" % (words, ", ".join("%s %.3f" % kv for kv in floors[key].items()))
        headline += "; over its floor (array: host copy, held: sliced, iterable: Python copy): " + ", ".join(
            "%s %.3f" % kv for kv in over_floor.items()
        )
        headline += "; PyTorch prefetched: " + (
            ", ".join("%s %.3f" % kv for kv in peer["prefetched"].items()) if "prefetched" in peer else peer["skipped"]
        )
    return {
        "rows": table,
        "ratios": ratios,
        **floors,
        "over its floor": over_floor,
        "producer us/batch": dict(zip(["%dx%d" % s[:2] for s in shapes], profiles)),
        "target": "<= 1.05 x resident (array and held datasets), <= 1.10 x (a Python iterable), both shapes",
        "met": met,
        "headline": headline,
    }


def torch_small_steps(b, shapes, steps, rounds):
    """The PyTorch peer of scenario 19 (bench/torch_small_step.py), run by ``--torch-python``: its rows (parts
    named "PyTorch ...", each x PyTorch's own resident step) and its prefetched ratios; or why it did not run."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "torch.json")
        args = ["--json", out, "--shapes", ",".join("%dx%d:%d" % s for s in shapes), "--steps", steps]
        _, why = run_torch_peer(b.args.torch_python, "torch_small_step", args + ["--rounds", rounds], 600)
        if why:
            return {"skipped": why}
        with open(out) as f:
            profiles = json.load(f)["profiles"]
    rows = [
        {
            "step": p["shape"],
            "hidden": p["hidden"],
            "part": "PyTorch " + r["part"],
            "us/step": r["us/step"],
            "x resident": r["x resident"],
        }
        for p in profiles
        for r in p["rows"]
    ]
    prefetched = {p["shape"]: next(r["x resident"] for r in p["rows"] if r["part"] == "prefetched") for p in profiles}
    return {"rows": rows, "prefetched": prefetched}


# ---- 20: the user's own generator (bench/generator_step.py) ----------------------------------


@scenario(
    20,
    "The user's own minibatch generator: a Feeder over it against the plain loop given the arrays, 0.2 to 2 ms steps",
    needs_gpu=False,
)
def generator_steps(b):
    from bench import generator_step

    steps, rounds, samples = (60, 3, 8000) if b.quick else (300, 7, 50000)
    results = generator_step.run(steps=steps, rounds=rounds, samples=samples)
    rows = []
    for r in results:
        us = {row["part"]: row["median us"] for row in r["rows"]}
        row = {"step": "%.1f ms" % r["target ms"], "hidden": r["hidden"]}
        row.update(("%s us" % part, us[part]) for part in generator_step.PARTS)
        spread = {row["part"]: row["spread"] for row in r["rows"]}
        row.update(("%s spread" % part, spread[part]) for part in generator_step.PARTS)  # slowest / fastest round
        row.update(r["ratios"])
        fed = r["fed feeder"]
        if fed.get("gil_waits"):
            row["fed GIL wait us/element"] = 1e6 * fed["gil_wait_s"] / fed["gil_waits"]
        rows.append(row)
    # The issues' figures: the Feeder never slower than the loop it replaces; a step from a pre-filled ring and
    # from a dataset held in GPU memory within 1.05 x resident (what the consumer's own per-step cost adds); the
    # generator's Feeder and the array dataset within 1.15 x resident at the smallest step (issue 28).
    worst = {ratio: max(r["ratios"][ratio] for r in results) for ratio in ("fed / given", "prefilled / resident")}
    worst["held / resident"] = max(r["ratios"]["held / resident"] for r in results)
    smallest = results[0]["ratios"]
    return {
        "rows": rows,
        "target": "fed / given <= 1, prefilled / resident and held / resident <= 1.05 at every step size; "
        "fed / resident and array / resident <= 1.15 at the smallest",
        "met": worst["fed / given"] <= 1.0
        and worst["prefilled / resident"] <= 1.05
        and worst["held / resident"] <= 1.05
        and smallest["fed / resident"] <= 1.15
        and smallest["array / resident"] <= 1.15,
        "headline": "; ".join(
            "%s: %s" % (ratio, ", ".join("%.3f" % r["ratios"][ratio] for r in results))
            for ratio in generator_step.HEADLINE
        ),
    }


# ---- 22: an array dataset held in GPU memory (bench/held_bench.py) ----------------------


@scenario(
    22,
    "Array dataset in GPU memory (device=True): the shuffled gather against PCIe and the shared-variable idiom, "
    "the MLP step against resident",
)
def held_dataset(b):
    from bench import held_bench

    return held_bench.held_dataset(b)


# ---- 26: rows that are not the slots' bytes (bench/layouts_bench.py) -------------------


@scenario(
    26,
    "Array datasets cast or strided: uint8 labels against int32 (MNIST), a Fortran memmap and a strided view "
    "against C-contiguous rows",
    needs_gpu=False,
)
def layouts(b):
    from bench import layouts_bench

    return layouts_bench.layouts(b)


# ---- 32 and 33: users' scripts, each against its own loop (issue 43.6) -----------------------


@scenario(
    32,
    "Lasagne's MNIST MLP (uint8 labels, batch 500, Nesterov momentum): the queue's ways against the example's own loop",
    needs_gpu=False,
)
def lasagne_mnist(b):
    from bench import lasagne_mlp

    return lasagne_mlp.scenario(b)


@scenario(33, "Keras 2.3.1's MLP: fed from the queue against its own fit", needs_gpu=False)
def keras_mlp(b):
    """Seconds per epoch of each way (bench/keras_bench.py), the ways in turn over rounds, against ``fit``."""
    from bench.rounds import interleave, summary

    try:
        from bench import keras_bench
    except ImportError as exc:
        reason = "Keras does not import here (%s)" % exc
        return {"skipped": reason, "headline": "skipped: " + reason}
    rows, batch, hidden, rounds = (10000, 250, 256, 3) if b.quick else (60000, 250, 256, 5)
    X = b.rng.random((rows, 784), dtype=np.float32)
    Y = b.rng.integers(0, 10, rows).astype("int32")
    ways = {"fit": keras_bench.numpy_way(X, Y, batch, hidden)}
    ways["queue, array dataset"] = keras_bench.queue_way(X, Y, batch, hidden, False)
    if b.on_gpu:
        ways["queue, held"] = keras_bench.queue_way(X, Y, batch, hidden, True)

    def timed(epoch):
        began = time.perf_counter()
        epoch()
        return time.perf_counter() - began

    for epoch in ways.values():  # compiles, and warms every path once
        epoch()
    times = interleave({name: functools.partial(timed, epoch) for name, epoch in ways.items()}, rounds)
    fit = summary(times["fit"])["median"]
    table = [
        {
            "way": name,
            "s/epoch": summary(values)["median"],
            "spread": summary(values)["spread"],
            "fit / this": fit / summary(values)["median"],
        }
        for name, values in times.items()
    ]
    return {
        "rows": table,
        "data": [rows, 784],
        "batch": batch,
        "hidden": hidden,
        "rounds": rounds,
        "target": "the queue's ways at least as fast as fit (fit / this >= 1)",
        "met": all(r["fit / this"] >= 1 for r in table),
        "headline": "fit / this: " + ", ".join("%s %.2f" % (r["way"], r["fit / this"]) for r in table[1:]),
    }


# ---- 44: auto against the best fixed setting (bench/auto_bench.py) -------------------


@scenario(
    44,
    "Auto (capacity, copy threads, workers) against the best fixed setting of a sweep: map-style decode with "
    "workers, an in-RAM array dataset, a generator",
    needs_gpu=False,
)
def auto_against_sweep(b):
    from bench import auto_bench

    return auto_bench.auto_against_sweep(b)


SCENARIOS = [
    limit,
    transfer_bound,
    balanced,
    mlp,
    compute_bound,
    small_batches,
    peer,
    uint8_images,
    read_every,
    cpu_target,
    observe_cost,
    cpu_heavy_pipeline,
    large_samples,
    cpu_handoff,
    copy_bound,
    array_dataset,
    experts_idiom,
    device_producer,
    variable_length,
    small_steps,
    generator_steps,
    held_dataset,
    layouts,
    lasagne_mnist,
    keras_mlp,
    auto_against_sweep,
]


def chosen(only):
    """The scenarios ``--only`` runs (every one when it names none): those it names (3 names 3.5 too) and
    those whose results they read, in the run's order."""
    if not only:
        return list(SCENARIOS)
    by_number = {fn.number: fn for fn in SCENARIOS}
    wanted, todo = set(), [fn.number for fn in SCENARIOS if fn.number in only or int(fn.number) in only]
    while todo:
        number = todo.pop()
        if number not in wanted:
            wanted.add(number)
            todo += by_number[number].needs
    return [fn for fn in SCENARIOS if fn.number in wanted]


def machine_name():
    """The processor, its cores and the GPUs, as this machine reports them."""
    try:
        gpus = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
            )
            .stdout.strip()
            .splitlines()
        )
    except (OSError, subprocess.SubprocessError):
        gpus = []
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return "%s (%d cores), %s" % (cpu, os.cpu_count(), ", ".join(gpus) or "no GPU")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not figures")
    parser.add_argument("--only", default="", help="comma-separated scenario numbers")
    parser.add_argument("--out", default=os.path.join(ROOT, "doc", "bench", "results.json"))
    parser.add_argument("--torch-python", default="python3", help="a Python with PyTorch, for scenario 6")
    parser.add_argument("--no-report", action="store_true", help="write the JSON only")
    parser.add_argument(
        "--merge", action="store_true", help="keep the other scenarios of the existing results file (with --only)"
    )
    parser.add_argument(
        "--join",
        nargs="+",
        metavar="PART",
        help="write one record (--out) of these results files of one machine, run no scenario",
    )
    args = parser.parse_args(argv)
    if args.join:
        run = joined(args.join)
        write_record(run, args.out, report=not args.no_report)
        return run
    only = {float(n) for n in args.only.split(",") if n}

    b = Bench(args)
    run = {
        "machine": machine_name(),
        "device": theano.config.device,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([sys.executable, "bench/run.py"] + list(argv if argv is not None else sys.argv[1:])),
        "copy_threads": _engine.copy_threads(),
        "scenarios": [],
    }
    for fn in chosen(only):
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
        print(
            "[%s] %s: %s" % (fn.number, fn.title, entry.get("headline") or entry.get("skipped") or entry.get("error")),
            flush=True,
        )
    if args.merge and os.path.exists(args.out):
        run = merged(args.out, run)
    write_record(run, args.out, report=not args.no_report)
    return run


if __name__ == "__main__":
    main()
