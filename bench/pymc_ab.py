"""A/B of two installs of theano_queue on bench/pymc_bench.py's PyMC fits: which is faster against pm.Minibatch.

Each round runs ``bench/pymc_bench.py --rounds 1`` once per install, each a fresh process, old then new, the next
round new then old (AB BA ...); an install is a folder put first on ``PYTHONPATH`` (a ``pip install --target``
of the tree's wheel), or ``-`` for the python's own.  Prints each round's ``x Minibatch`` of the queue and,
per install, the median with the rounds' min-max, then new/old of the medians and the paired median::

    pip wheel --no-deps -w /tmp/old/whl <old checkout>
    pip install --no-deps --target /tmp/old/site /tmp/old/whl/*.whl
    python bench/pymc_ab.py --old /tmp/old/site --new - --rounds 8 --linker c

The fits' arguments after ``--`` go to pymc_bench.py (default: the issue's 200000 x 10, 10000 steps).
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FITS = ["--samples", "200000", "--features", "10", "--iterations", "10000"]


def queue_ratio(site, linker, fits):
    """The queue's x Minibatch in one fresh process importing theano_queue from ``site`` ("-": the python's)."""
    env = dict(os.environ, PYTHONSAFEPATH="1")
    env.pop("PYTHONPATH", None)
    if site != "-":
        env["PYTHONPATH"] = site
    command = [sys.executable, "-W", "ignore", os.path.join(HERE, "pymc_bench.py"), "--rounds", "1"]
    out = subprocess.run([*command, "--linker", linker, *fits], env=env, capture_output=True, text=True, check=True)
    entry = json.loads(out.stdout[out.stdout.index("{") :])
    return next(r["x Minibatch"] for r in entry["rows"] if r["feeding"] == "queue")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the old install's folder, or - for the python's own")
    parser.add_argument("--new", default="-", help="the new install's folder, or - for the python's own")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--linker", choices=["c", "numba"], default="c")
    parser.add_argument("fits", nargs="*", help="pymc_bench.py's arguments (after --)")
    args = parser.parse_args(argv)
    fits = args.fits or FITS
    ratios = {"old": [], "new": []}
    for r in range(args.rounds):
        for tree in ("old", "new") if r % 2 == 0 else ("new", "old"):
            ratios[tree].append(queue_ratio(getattr(args, tree), args.linker, fits))
            print("round %d %s %.3f" % (r + 1, tree, ratios[tree][-1]), flush=True)
    for tree, values in ratios.items():
        print("%s: median %.3f x Minibatch [%.3f-%.3f]" % (tree, np.median(values), min(values), max(values)))
    paired = np.median(np.array(ratios["new"]) / np.array(ratios["old"]))
    print("new/old: %.3f of the medians, %.3f paired" % (np.median(ratios["new"]) / np.median(ratios["old"]), paired))


if __name__ == "__main__":
    main()
