"""PyMC 5 ADVI fed by the queue against ``pm.Minibatch``, both linkers, in a user's install.

The fits of ``examples/pymc_advi.py`` (Bayesian logistic regression, an
endless shuffled array-dataset Feeder against ``pm.Minibatch``), taking turns
round by round; ms per 1000 steps, the compile left out; medians and
spreads.  ``--record`` writes the run into ``doc/bench/results.json`` as
scenario :data:`NUMBER` (what ``doc/pymc.rst`` quotes; ``bench/report.py``
renders it).  Run it with the python of a user's install (no ``pytensorrc``)::

    python bench/pymc_bench.py --rounds 5 --record
"""

import argparse
import datetime
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import pymc_advi  # noqa: E402  (the example's model and fits)

NUMBER = 30
RECORD = os.path.join(os.path.dirname(HERE), "doc", "bench", "results.json")
FITS = {"pm.Minibatch": pymc_advi.fit_minibatch, "queue": pymc_advi.fit_queue}


def measure(args):
    """{(linker, feeding): [ms per 1000 steps, one a round]}, the fits taking turns in each round."""
    import pytensor

    x_all, y_all = pymc_advi.make_data(args.samples, args.features, args.seed)
    times = {(linker, name): [] for linker in args.linkers for name in FITS}
    for r in range(args.rounds):
        for linker in args.linkers:
            mode = pytensor.compile.mode.get_mode(pymc_advi.MODES[linker])
            for name, run in FITS.items():
                ms = run(x_all, y_all, args, mode)[0]
                times[linker, name].append(ms)
                print("round %d %-5s %-12s %8.1f ms/1000 steps" % (r, linker, name, ms), flush=True)
    return times


def rows(times, linkers):
    table = []
    for linker in linkers:
        base = float(np.median(times[linker, "pm.Minibatch"]))
        for name in FITS:
            ms = times[linker, name]
            table.append(
                {
                    "linker": linker,
                    "feeding": name,
                    "median ms": float(np.median(ms)),
                    "min ms": float(min(ms)),
                    "max ms": float(max(ms)),
                    "x Minibatch": float(np.median(ms)) / base,
                }
            )
    return table


# Issue 43's targets: the queue at least 1.2x faster than pm.Minibatch on the C linker (default BLAS threads),
# and on Numba no slower than the 0.56 x of pm.Minibatch's time measured before.
TARGETS = {"c": 1 / 1.2, "numba": 0.56}


def verdict(table):
    """The scenario's target and whether the run met it, from its rows."""
    ratio = {r["linker"]: r["x Minibatch"] for r in table if r["feeding"] == "queue"}
    return {
        "target": "queue <= %.2f x pm.Minibatch's time on the C linker (1.2x faster), <= %.2f x on Numba"
        % (TARGETS["c"], TARGETS["numba"]),
        "met": all(ratio[linker] <= TARGETS[linker] for linker in ratio if linker in TARGETS),
    }


def scenario(args, times, seconds):
    import pymc as pm
    import pytensor

    table = rows(times, args.linkers)
    ratio = {r["linker"]: r["x Minibatch"] for r in table if r["feeding"] == "queue"}
    return {
        "number": NUMBER,
        "title": "PyMC 5 ADVI on the CPU: the queue against pm.Minibatch, a user's install",
        "rows": table,
        "setup": "%d x %d, batches of %d, %d steps, %d rounds taking turns; PyMC %s, PyTensor %s, blas__ldflags %r"
        % (
            args.samples,
            args.features,
            args.batch,
            args.iterations,
            args.rounds,
            pm.__version__,
            pytensor.__version__,
            pytensor.config.blas__ldflags,
        ),
        "headline": ", ".join("%s linker %.2f x pm.Minibatch's time" % item for item in sorted(ratio.items())),
        **verdict(table),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": "%s (%d cores)" % (platform.processor() or platform.machine(), os.cpu_count()),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load average": "%.1f %.1f %.1f" % os.getloadavg(),
        "seconds": seconds,
    }


def record(entry, path=RECORD):
    """Puts ``entry`` into results.json in place of the scenario of the same number."""
    with open(path) as f:
        run = json.load(f)
    run["scenarios"] = [s for s in run["scenarios"] if s.get("number") != entry["number"]] + [entry]
    with open(path, "w") as f:
        json.dump(run, f, indent=1)
        f.write("\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linker", choices=[*sorted(pymc_advi.MODES), "both"], default="both")
    parser.add_argument("--samples", type=int, default=500_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", action="store_true", help="write the run into doc/bench/results.json")
    args = parser.parse_args(argv)
    args.linkers = sorted(pymc_advi.MODES) if args.linker == "both" else [args.linker]
    start = time.perf_counter()
    times = measure(args)
    entry = scenario(args, times, time.perf_counter() - start)
    print(json.dumps(entry, indent=1))
    if args.record:
        record(entry)


if __name__ == "__main__":
    main()
