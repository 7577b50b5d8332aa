"""Bayesian logistic regression by ADVI in PyMC3 3.9.3 on Theano: ``pm.Minibatch`` against the queue.

    bash scripts/install-pymc3.sh && .venv-pymc3/bin/python examples/pymc3_advi.py [--rounds 5]

The Theano front end's counterpart of examples/pymc_advi.py (PyMC 5): the
same model, fitted with PyMC3's ``pm.fit(method="advi")`` two ways:

* **pm.Minibatch**: PyMC3's own, ``pm.Minibatch(X, batch_size=B)`` and the
  same for y with one random seed, so that they draw the same rows; the
  data set is a shared variable, and every step draws B random row numbers
  and gathers them in the graph;
* **queue**: ``x_q, y_q = q.dequeue()`` as the data, ``observed=y_q,
  total_size=N``, fed by an endless shuffled array-dataset Feeder.

PyMC3 turns Theano's ``compute_test_value`` on while it builds the model:
the dequeued variables carry test values then (zeros of the components'
shapes), and building the graph takes no element.  ``--obj-n-mc`` (default
3) draws that many Monte Carlo samples per step: the model is then written
on placeholders and the dequeued variables are put in by
``pm.fit(more_replacements=...)`` (:func:`fit_queue` says why); the
gradient walks past the Dequeue, which declares none.  The queue's fit
checks that it took one batch per step.

Each fit prints ms per 1000 iterations (the steps alone) and the RMSE of the
posterior means to the full-data maximum-likelihood coefficients; ``--rounds
R`` interleaves R rounds of both fits and prints medians and spreads.

PyMC3 3.9.3 as released imports ``numpy.asscalar`` (gone in numpy 1.23) and
``inspect.getargspec`` (gone in Python 3.11): :func:`shim_pymc3` puts them
back before ``import pymc3`` (doc/pymc.rst, "PyMC3 on Theano").
"""

import argparse
import collections
import inspect
import time

import numpy as np


def shim_pymc3():
    """The two names PyMC3 3.9.3 imports that numpy 1.23 and Python 3.11 no longer have."""
    if not hasattr(np, "asscalar"):
        np.asscalar = lambda a: a.item()
    if not hasattr(inspect, "getargspec"):
        arg_spec = collections.namedtuple("ArgSpec", "args varargs keywords defaults")
        inspect.getargspec = lambda f: arg_spec(*inspect.getfullargspec(f)[:4])


def make_data(n, d, seed):
    """n rows of d features whose labels follow a known logistic model (labels int32)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w = rng.standard_normal(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-x @ w))).astype(np.int32)
    return x, y


def full_data_mle(x, y, iterations=25):
    """The maximum-likelihood coefficients on all the data (Newton's method)."""
    w = np.zeros(x.shape[1])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-x @ w))
        hessian = (x * (p * (1 - p))[:, None]).T @ x
        w = w + np.linalg.solve(hessian, x.T @ (y - p))
    return w


def logistic_model(pm, x, y, d, n):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=d)
        pm.Bernoulli("obs", logit_p=pm.math.dot(x, beta), observed=y, total_size=n)
    return model


class StepClock:
    """A pm.fit callback: the time of every step's end, to time the steps without the compile before them."""

    def __init__(self):
        self.ends = []

    def __call__(self, approx, losses, i):
        self.ends.append(time.perf_counter())

    def ms_per_1000(self):
        return (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1) * 1e6


def fit(pm, model, args, replacements=None):
    clock = StepClock()
    approx = pm.fit(
        args.iterations,
        method="advi",
        model=model,
        random_seed=args.seed,
        obj_n_mc=args.obj_n_mc,
        more_replacements=replacements,
        progressbar=False,
        callbacks=[clock],
    )
    return approx, clock


def fit_minibatch(pm, x_all, y_all, args):
    # in_memory_size: PyMC3's default indexes the array with a list ([Ellipsis]), which numpy 1.23 refuses.
    size = len(x_all)
    x = pm.Minibatch(x_all, batch_size=args.batch, random_seed=args.seed, in_memory_size=size)
    y = pm.Minibatch(y_all, batch_size=args.batch, random_seed=args.seed, in_memory_size=size)
    approx, clock = fit(pm, logistic_model(pm, x, y, args.features, args.samples), args)
    return clock.ms_per_1000(), approx.mean.eval(), approx.hist


def fit_queue(pm, x_all, y_all, args):
    """The queue's data in the model (obj_n_mc 1), or swapped in by ``more_replacements`` (obj_n_mc > 1).

    With obj_n_mc > 1 PyMC3 clones the loss once per posterior sample inside
    a ``theano.scan``; data used in the model directly would be dequeued in
    the scan's loop (one batch per sample, and a gradient scan cannot take).
    The model is written on placeholders of a batch's shape, and
    ``pm.fit(more_replacements=...)`` puts the dequeued variables in after
    the scan is built, as PyMC3 documents for its own minibatches.
    """
    import theano

    import theano_queue as tq

    components = [("x", "float64", (args.batch, args.features)), ("y", "int32", (args.batch,))]
    q = tq.Queue(components, capacity=args.capacity, timeout=60)
    x, y = q.dequeue()
    replacements = None
    if args.obj_n_mc > 1:
        x_ph = theano.shared(x_all[: args.batch], name="x_batch")
        y_ph = theano.shared(y_all[: args.batch], name="y_batch")
        model = logistic_model(pm, x_ph, y_ph, args.features, args.samples)
        replacements = {x_ph: x, y_ph: y}
    else:
        model = logistic_model(pm, x, y, args.features, args.samples)
    with tq.Feeder(q, (x_all, y_all), epochs=None, shuffle=True, seed=args.seed):
        approx, clock = fit(pm, model, args, replacements)
    taken = q.stats()["dequeued"]
    if taken != args.iterations:
        raise AssertionError("the fit took %d batches for %d steps" % (taken, args.iterations))
    return clock.ms_per_1000(), approx.mean.eval(), approx.hist


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=500_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--capacity", type=int, default=4, help="the queue's slots")
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--obj-n-mc", type=int, default=3, help="Monte Carlo samples per step")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of both fits (medians, spreads)")
    parser.add_argument("--seed", type=int, default=1, help="not 0: Theano's MRG streams refuse it")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    shim_pymc3()
    import pymc3 as pm
    import theano

    x_all, y_all = make_data(args.samples, args.features, args.seed)
    mle = full_data_mle(x_all, y_all)
    print(
        "PyMC3 %s, Theano %s, numpy %s: %d rows x %d features, batches of %d, %d ADVI iterations, obj_n_mc=%d, "
        "%d round(s)"
        % (
            pm.__version__,
            theano.__version__,
            np.__version__,
            args.samples,
            args.features,
            args.batch,
            args.iterations,
            args.obj_n_mc,
            args.rounds,
        )
    )
    fits = {"pm.Minibatch": fit_minibatch, "queue": fit_queue}
    times = {name: [] for name in fits}
    for r in range(args.rounds):
        for name, run in fits.items():
            ms, means, hist = run(pm, x_all, y_all, args)
            times[name].append(ms)
            rmse = np.sqrt(np.mean((means - mle) ** 2))
            print(
                "round %d %-12s %8.1f ms/1000 it  RMSE to MLE %.4f  final loss %.1f  beta[:4] %s"
                % (r, name, ms, rmse, np.mean(hist[-1000:]), " ".join("%.3f" % v for v in means[:4]))
            )
    print("MLE beta[:4] %s" % " ".join("%.3f" % v for v in mle[:4]))
    print("\n%-12s %10s %18s %14s" % ("feeding", "median ms", "spread (min-max)", "queue/Minibatch"))
    base = np.median(times["pm.Minibatch"])
    for name, ms in times.items():
        print("%-12s %10.1f %8.1f - %-8.1f %14.2f" % (name, np.median(ms), min(ms), max(ms), np.median(ms) / base))


if __name__ == "__main__":
    main()
