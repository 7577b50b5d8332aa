"""Where a C-linker PyMC 5 ADVI step on the queue spends its time, against pm.Minibatch's (issue 43.5).

One compiled step function per feeding (``pm.ADVI(...).objective.step_function(score=True)``, what
``pm.fit`` runs), called ``--steps`` times a turn, the variants taking turns round by round:

* ``pm.Minibatch``: its index draw and gathers inside the step;
* ``queue, Feeder``: an endless shuffled array-dataset Feeder beside the step (as shipped);
* ``queue, pre-filled``: the same batches put before the turn, no Feeder thread: the step's own cost;

each with OpenBLAS's default threads and with one (``openblas_set_num_threads`` on the library PyTensor's
C modules link, between turns).  Prints us a step (medians, spreads), the CPU a step of the step's thread
and of the others (OpenBLAS's, the Feeder's), and what the queue's steps waited for a batch; ``--json PATH``
writes the table::

    python bench/pymc_profile.py --samples 200000 --features 10 --rounds 5
"""

import argparse
import ctypes
import ctypes.util
import json
import os
import sys
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


def timed(steps, step):
    """(wall, the calling thread's CPU, the other threads' CPU) seconds a step over ``steps`` calls of ``step``."""
    wall, own, process = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(steps):
        step()
    own = time.thread_time() - own
    return (time.perf_counter() - wall) / steps, own / steps, (time.process_time() - process - own) / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--capacity", type=int, default=4, help="the Feeder's queue's slots")
    parser.add_argument("--blas", choices=["both", "default"], default="both", help="also with one BLAS thread")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    mode = pytensor.compile.mode.get_mode("CVM")
    x_all, y_all = pymc_advi.make_data(args.samples, args.features, 0)
    n, d, b = args.samples, args.features, args.batch

    xm, ym = pm.Minibatch(x_all, y_all, batch_size=b)
    minibatch_step = step_function(pymc_advi.logistic_model(xm, ym, d, n), mode)

    components = [("x", "float64", (b, d)), ("y", "int32", (b,))]
    fed = tq.Queue(components, capacity=args.capacity, timeout=60)
    fed_step = step_function(pymc_advi.logistic_model(*fed.dequeue(), d, n), mode)
    filled = tq.Queue(components, capacity=args.steps, timeout=60)
    filled_step = step_function(pymc_advi.logistic_model(*filled.dequeue(), d, n), mode)
    rng = np.random.default_rng(1)

    def run_minibatch():
        return timed(args.steps, minibatch_step), None

    def run_fed():
        with tq.Feeder(fed, (x_all, y_all), epochs=None, shuffle=True, seed=0):
            while fed.size() < fed.capacity:
                time.sleep(0.001)
            waited = fed.stats()["consumer_wait_s"]
            result = timed(args.steps, fed_step)
            waited = (fed.stats()["consumer_wait_s"] - waited) / args.steps
        fed.close(cancel_pending=True)
        fed.reopen()
        return result, waited

    def run_filled():
        order = rng.permutation(n)
        for i in range(args.steps):
            rows = order[(i * b) % (n - b) :][:b]
            filled.put(x_all[rows], y_all[rows])
        return timed(args.steps, filled_step), None

    blas = openblas()
    default_threads = blas.openblas_get_num_threads() if blas else None
    settings = [("default", default_threads)]
    if blas and default_threads != 1 and args.blas == "both":
        settings.append(("1", 1))
    variants = {"pm.Minibatch": run_minibatch, "queue, Feeder": run_fed, "queue, pre-filled": run_filled}
    for run in variants.values():  # warm-up: first calls, page faults
        run()
    results = {(s, v): [] for s, _ in settings for v in variants}
    for r in range(args.rounds):
        for setting, threads in settings:
            if blas:
                blas.openblas_set_num_threads(threads)
            for name, run in variants.items():
                (wall, own, others), waited = run()
                waited_us = None if waited is None else waited * 1e6
                results[setting, name].append((wall * 1e6, own * 1e6, others * 1e6, waited_us))
                print("round %d blas %-7s %-18s %7.1f us/step" % (r, setting, name, wall * 1e6), flush=True)
    table = []
    print(
        "\n%-8s %-18s %9s %17s %11s %10s %10s %9s"
        % ("BLAS", "feeding", "median us", "spread", "x Minibatch", "step CPU", "others CPU", "waited")
    )
    for setting, _ in settings:
        base = np.median([m[0] for m in results[setting, "pm.Minibatch"]])
        for name in variants:
            runs = results[setting, name]
            walls = [m[0] for m in runs]
            row = {
                "BLAS threads": setting,
                "feeding": name,
                "median us": float(np.median(walls)),
                "min us": float(min(walls)),
                "max us": float(max(walls)),
                "x Minibatch": float(np.median(walls) / base),
                "step thread CPU us": float(np.median([m[1] for m in runs])),
                "other threads CPU us": float(np.median([m[2] for m in runs])),
            }
            if runs[0][3] is not None:
                row["waited us"] = float(np.median([m[3] for m in runs]))
            table.append(row)
            print(
                "%-8s %-18s %9.1f %8.1f - %-8.1f %11.2f %10.1f %10.1f %9s"
                % (
                    setting,
                    name,
                    row["median us"],
                    row["min us"],
                    row["max us"],
                    row["x Minibatch"],
                    row["step thread CPU us"],
                    row["other threads CPU us"],
                    "%.1f" % row["waited us"] if "waited us" in row else "--",
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
