"""pm.Minibatch against the queue's Feeder woken by every dequeue (room 1) and by half the queue (the default).

    cd /tmp && PYTHONSAFEPATH=1 /path/to/checkout/.venv-pymc/bin/python -W ignore \\
        /path/to/checkout/bench/feeder_room_ab.py [--rounds 5] [--iterations 20000]       # PyMC 5, C linker
    .venv-pymc3/bin/python -W ignore bench/feeder_room_ab.py --pymc3 [--rounds 5]           # PyMC3 on Theano

The fits of examples/pymc_advi.py (PyMC 5, C linker) or examples/pymc3_advi.py
(PyMC3, ``obj_n_mc=1``), in interleaved rounds of three: ``pm.Minibatch``;
the queue with the Feeder asking for room 1 (a dequeue wakes it for one
batch, as before the room was asked for); the queue as shipped
(``ArrayProducer.refill_room``: half the slots).  Prints ms per 1000
iterations per fit, then medians, spreads and the ratio to ``pm.Minibatch``.
doc/pymc.rst ("Speed, measured") has what it showed.
"""

import argparse
import importlib.util
import os
import sys

import numpy as np

from theano_queue.feed.arrays import ArrayProducer

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
SHIPPED_ROOM = ArrayProducer.__dict__["refill_room"]


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def asking_for(room):
    """Makes the Feeders made next ask for ``room`` free slots (None: as shipped)."""
    ArrayProducer.refill_room = SHIPPED_ROOM if room is None else classmethod(lambda cls, capacity, batch_bytes: room)


def pymc5_fits(args):
    example = load_example("pymc_advi")
    import pytensor

    ns = argparse.Namespace(samples=500_000, features=20, batch=500, capacity=4, iterations=args.iterations, seed=0)
    x, y = example.make_data(ns.samples, ns.features, ns.seed)
    mode = pytensor.compile.mode.get_mode("CVM")
    return (
        lambda: example.fit_minibatch(x, y, ns, mode)[0],
        lambda: example.fit_queue(x, y, ns, mode)[0],
    )


def pymc3_fits(args):
    example = load_example("pymc3_advi")
    example.shim_pymc3()
    import pymc3 as pm

    ns = example.parse(["--iterations", str(args.iterations), "--obj-n-mc", "1"])
    x, y = example.make_data(ns.samples, ns.features, ns.seed)
    return (
        lambda: example.fit_minibatch(pm, x, y, ns)[0],
        lambda: example.fit_queue(pm, x, y, ns)[0],
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pymc3", action="store_true", help="PyMC3 on Theano (examples/pymc3_advi.py)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20_000)
    args = parser.parse_args(argv)
    minibatch, queue = (pymc3_fits if args.pymc3 else pymc5_fits)(args)
    fits = {"pm.Minibatch": minibatch, "queue, room 1": lambda: asking_for(1) or queue(), "queue": queue}
    times = {name: [] for name in fits}
    for r in range(args.rounds):
        for name, fit in fits.items():
            asking_for(None)
            times[name].append(fit())
        print(
            "round %d  %s  load %.2f"
            % (r, "  ".join("%s %.1f" % (n, t[-1]) for n, t in times.items()), os.getloadavg()[0]),
            flush=True,
        )
    base = np.median(times["pm.Minibatch"])
    print("\n%-14s %10s %18s %16s" % ("feeding", "median ms", "spread (min-max)", "/ pm.Minibatch"))
    for name, ms in times.items():
        print("%-14s %10.1f %8.1f - %-8.1f %14.2f" % (name, np.median(ms), min(ms), max(ms), np.median(ms) / base))


if __name__ == "__main__":
    main()
