"""Where a C-linker PyMC 5 ADVI step on the queue spends its time, against pm.Minibatch's (issue 43.5).

One compiled step function per feeding (``pm.ADVI(...).objective.step_function(score=True)``, what
``pm.fit`` runs), called ``--steps`` times a turn, the variants taking turns round by round:

* ``pm.Minibatch``: its index draw and gathers inside the step;
* ``queue, Feeder``: an endless shuffled array-dataset Feeder beside the step (as shipped);
* ``queue, pre-filled``: the same batches put before the turn, no Feeder thread: the step's own cost;

each with OpenBLAS's default threads and with one (``openblas_set_num_threads`` on the library PyTensor's
C modules link, between turns).  Prints us a step (medians, spreads), the share of the queue's steps that
waited for a batch, and the Feeder thread's CPU a step; ``--json PATH`` writes the table::

    python bench/pymc_profile.py --samples 200000 --features 10 --rounds 5
"""

import argparse
import ctypes
import ctypes.util
import json
import os
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import pymc as pm  # noqa: E402
import pymc_advi  # noqa: E402
import pytensor  # noqa: E402

import theano_queue.pytensor as tq  # noqa: E402


def openblas():
    """OpenBLAS as PyTensor's C modules link it (blas__ldflags -lopenblas), or None."""
    name = ctypes.util.find_library("openblas")
    lib = ctypes.CDLL(name) if name else None
    return lib if lib is not None and hasattr(lib, "openblas_set_num_threads") else None


def step_function(model, mode):
    advi = pm.ADVI(model=model, random_seed=0)
    return advi.objective.step_function(score=True, compile_kwargs={"mode": mode})


def thread_cpu_s(native_id):
    """A thread's user+system CPU seconds, from /proc."""
    with open("/proc/self/task/%d/stat" % native_id) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def feeder_threads(before):
    return [t.native_id for t in threading.enumerate() if t.native_id not in before]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    mode = pytensor.compile.mode.get_mode("CVM")
    x_all, y_all = pymc_advi.make_data(args.samples, args.features, 0)
    n, d, b = args.samples, args.features, args.batch

    xm, ym = pm.Minibatch(x_all, y_all, batch_size=b)
    minibatch_step = step_function(pymc_advi.logistic_model(xm, ym, d, n), mode)

    components = [("x", "float64", (b, d)), ("y", "int32", (b,))]
    fed = tq.Queue(components, capacity=4, timeout=60)
    fed_step = step_function(pymc_advi.logistic_model(*fed.dequeue(), d, n), mode)
    filled = tq.Queue(components, capacity=args.steps, timeout=60)
    filled_step = step_function(pymc_advi.logistic_model(*filled.dequeue(), d, n), mode)
    rng = np.random.default_rng(1)

    def run_minibatch():
        start = time.perf_counter()
        for _ in range(args.steps):
            minibatch_step()
        return (time.perf_counter() - start) / args.steps, None, None

    def run_fed():
        before = {t.native_id for t in threading.enumerate()}
        with tq.Feeder(fed, (x_all, y_all), epochs=None, shuffle=True, seed=0):
            while fed.size() < fed.capacity:
                time.sleep(0.001)
            threads = feeder_threads(before)
            cpu0 = sum(thread_cpu_s(t) for t in threads)
            stats0 = fed.stats()
            start = time.perf_counter()
            for _ in range(args.steps):
                fed_step()
            seconds = time.perf_counter() - start
            cpu = sum(thread_cpu_s(t) for t in threads) - cpu0
            stats = fed.stats()
        fed.close(cancel_pending=True)
        fed.reopen()
        waited = (stats["consumer_wait_s"] - stats0["consumer_wait_s"]) / args.steps
        return seconds / args.steps, cpu / args.steps, waited

    def run_filled():
        order = rng.permutation(n)
        for i in range(args.steps):
            rows = order[(i * b) % (n - b) :][:b]
            filled.put(x_all[rows], y_all[rows])
        start = time.perf_counter()
        for _ in range(args.steps):
            filled_step()
        return (time.perf_counter() - start) / args.steps, None, None

    blas = openblas()
    default_threads = blas.openblas_get_num_threads() if blas else None
    settings = [("default", default_threads)] + ([("1", 1)] if blas and default_threads != 1 else [])
    variants = {"pm.Minibatch": run_minibatch, "queue, Feeder": run_fed, "queue, pre-filled": run_filled}
    for run in variants.values():  # warm-up: first calls, page faults
        run()
    results = {(s, v): [] for s, _ in settings for v in variants}
    extra = {(s, v): [] for s, _ in settings for v in variants}
    for r in range(args.rounds):
        for setting, threads in settings:
            if blas:
                blas.openblas_set_num_threads(threads)
            for name, run in variants.items():
                per_step, feeder_cpu, waited = run()
                results[setting, name].append(per_step * 1e6)
                extra[setting, name].append((feeder_cpu, waited))
                print("round %d blas %-7s %-18s %7.1f us/step" % (r, setting, name, per_step * 1e6), flush=True)
    table = []
    print(
        "\n%-8s %-18s %9s %17s %12s %12s %12s"
        % ("BLAS", "feeding", "median us", "spread", "x Minibatch", "Feeder CPU", "waited us")
    )
    for setting, _ in settings:
        base = np.median(results[setting, "pm.Minibatch"])
        for name in variants:
            times = results[setting, name]
            cpu = [c for c, _ in extra[setting, name] if c is not None]
            waited = [w for _, w in extra[setting, name] if w is not None]
            row = {
                "BLAS threads": setting,
                "feeding": name,
                "median us": float(np.median(times)),
                "min us": float(min(times)),
                "max us": float(max(times)),
                "x Minibatch": float(np.median(times) / base),
            }
            if cpu:
                row["Feeder CPU us/step"] = float(np.median(cpu) * 1e6)
                row["waited us/step"] = float(np.median(waited) * 1e6)
            table.append(row)
            print(
                "%-8s %-18s %9.1f %8.1f - %-8.1f %12.2f %12s %12s"
                % (
                    setting,
                    name,
                    row["median us"],
                    row["min us"],
                    row["max us"],
                    row["x Minibatch"],
                    "%.1f" % row["Feeder CPU us/step"] if cpu else "--",
                    "%.1f" % row["waited us/step"] if cpu else "--",
                )
            )
    print(
        "load average %.1f %.1f %.1f; OpenBLAS default threads %s; blas__ldflags %r"
        % (*os.getloadavg(), default_threads, pytensor.config.blas__ldflags)
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
