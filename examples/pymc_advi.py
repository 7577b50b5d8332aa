"""Bayesian logistic regression by ADVI in PyMC 5: ``pm.Minibatch`` against the queue.

    make pymc-deps && PYTHONSAFEPATH=1 .venv-pymc/bin/python examples/pymc_advi.py [--linker both --rounds 5]

The same model, fitted with ``pm.fit(method="advi")`` two ways:

* **pm.Minibatch**: PyMC's own, ``x_b, y_b = pm.Minibatch(X, y,
  batch_size=B)``; the data set is a constant inside the graph, and every
  step draws B random row numbers (with replacement) and gathers them there;
* **queue**: ``x_q, y_q = q.dequeue()`` as the data, ``observed=y_q,
  total_size=N``, fed by an endless shuffled array-dataset Feeder
  (``epochs=None``: ``pm.fit``'s ``n`` says when to stop) that gathers the
  next batches from native threads while the step runs.

Each prints ms per 1000 iterations (the steps alone: compiling is left out)
and how far the posterior means are from the full-data maximum-likelihood
coefficients (RMSE).  ``--rounds R`` interleaves R rounds of every fit and
prints medians and spreads.

Then what ``pm.Minibatch`` cannot do: **exact epochs, resumed**.  Its rows are
drawn with replacement (one epoch's worth of steps sees about 63 % of the
rows: measured on its own index below) and it has no position to save.  The
queue's Feeder goes through every row once per epoch; a fit stopped half-way
saves ``feeder.state_dict()`` and the approximation's parameters, and a fresh
model, queue and Feeder (``state=saved``) go on with the next batch: the two
fits together take every batch of both epochs exactly once
(:class:`~theano_queue.pytensor.StopWhenDrained` ends each when its data end).
The optimizer's moments (Adam's, in PyMC's step function) start again.

Run it with the installed package (``make test-pymc`` installs it into
.venv-pymc); from the checkout's root add ``-P`` (or PYTHONSAFEPATH=1) so that
the installed copy is imported.
"""

import argparse
import time

import numpy as np
import pymc as pm
import pytensor

import theano_queue.pytensor as tq

MODES = {"c": "CVM", "numba": "NUMBA"}


def make_data(n, d, seed):
    """n rows of d features whose labels follow a known logistic model (labels int32: see doc/pymc.rst)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w = rng.standard_normal(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-x @ w))).astype(np.int32)
    return x, y


def full_data_mle(x, y, iterations=25):
    """The maximum-likelihood coefficients on all the data (Newton's method): what the posterior means approach."""
    w = np.zeros(x.shape[1])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-x @ w))
        hessian = (x * (p * (1 - p))[:, None]).T @ x
        w = w + np.linalg.solve(hessian, x.T @ (y - p))
    return w


def logistic_model(x, y, d, n):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=d)
        pm.Bernoulli("obs", logit_p=x @ beta, observed=y, total_size=n)
    return model


class StepClock:
    """A pm.fit callback: the time of every step's end, to time the steps without the compile before them."""

    def __init__(self):
        self.ends = []

    def __call__(self, approx, losses, i):
        self.ends.append(time.perf_counter())

    def ms_per_1000(self):
        return (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1) * 1e6


def fit(model, iterations, mode, seed, callbacks=()):
    clock = StepClock()
    approx = pm.fit(
        iterations,
        method="advi",
        model=model,
        random_seed=seed,
        progressbar=False,
        callbacks=[clock, *callbacks],
        compile_kwargs={"mode": mode},
    )
    return approx, clock


def fit_minibatch(x_all, y_all, args, mode):
    x, y = pm.Minibatch(x_all, y_all, batch_size=args.batch)
    approx, clock = fit(logistic_model(x, y, args.features, args.samples), args.iterations, mode, args.seed)
    return clock.ms_per_1000(), approx.mean.eval(), ""


def make_queue(args):
    components = [("x", "float64", (args.batch, args.features)), ("y", "int32", (args.batch,))]
    return tq.Queue(components, capacity=args.capacity)


def fit_queue(x_all, y_all, args, mode):
    q = make_queue(args)
    x, y = q.dequeue()
    model = logistic_model(x, y, args.features, args.samples)
    with tq.Feeder(q, (x_all, y_all), epochs=None, shuffle=True, seed=args.seed):
        approx, clock = fit(model, args.iterations, mode, args.seed)
    # What the steps waited for their data: the queue's share of the time per step.
    stats = q.stats()
    waited = "  waited %.1f us/step" % (stats["consumer_wait_s"] / stats["dequeued"] * 1e6)
    return clock.ms_per_1000(), approx.mean.eval(), waited


def minibatch_coverage(args):
    """The share of rows that one epoch's worth of pm.Minibatch draws sees, from its own index graph."""
    _, rows = pm.Minibatch(np.zeros((args.samples, 1)), np.arange(args.samples), batch_size=args.batch)
    draw = pm.compile([], rows, random_seed=args.seed)
    seen = np.unique(np.concatenate([draw() for _ in range(args.samples // args.batch)]))
    return len(seen) / args.samples


def fit_part(x_all, y_all, args, mode, state=None, params=None):
    """One part of a two-epoch fit: a fresh queue, model and Feeder; ADVI from ``params``; ends with the data."""
    q = make_queue(args)
    x, y = q.dequeue()
    advi = pm.ADVI(model=logistic_model(x, y, args.features, args.samples), random_seed=args.seed)
    for shared, value in zip(advi.approx.params, params or ()):
        shared.set_value(value)
    feeder = tq.Feeder(q, (x_all, y_all), epochs=2, shuffle=True, seed=args.seed, state=state)
    stop = tq.StopWhenDrained(q)
    with feeder:
        # The first part stops half-way through the second epoch; the second part
        # is given more steps than are left, and ends when the data do.
        per_epoch = feeder.batches_per_epoch
        steps = per_epoch + per_epoch // 2 if state is None else 2 * per_epoch
        advi.fit(steps, progressbar=False, callbacks=[stop], compile_kwargs={"mode": mode})
        saved = feeder.state_dict()
    return q.stats()["dequeued"], saved, [p.get_value() for p in advi.approx.params], advi.approx


def resume_case(x_all, y_all, args, mode, mle):
    per_epoch = -(-args.samples // args.batch)
    first, saved, params, _ = fit_part(x_all, y_all, args, mode)
    second, _, _, approx = fit_part(x_all, y_all, args, mode, state=saved, params=params)
    rmse = np.sqrt(np.mean((approx.mean.eval() - mle) ** 2))
    print("\nexact epochs, resumed: 2 epochs of %d batches" % per_epoch)
    print("  first fit took %d batches, saved %s" % (first, saved))
    print("  resumed fit took %d batches: %d in all, RMSE to the MLE %.4f" % (second, first + second, rmse))
    print("  pm.Minibatch: one epoch's worth of its draws saw %.1f%% of the rows" % (100 * minibatch_coverage(args)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linker", choices=[*sorted(MODES), "both"], default="c")
    parser.add_argument("--samples", type=int, default=500_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--capacity", type=int, default=4, help="the queue's slots")
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of every fit (medians, spreads)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-resume", dest="resume", action="store_false", help="skip the exact-epochs case")
    args = parser.parse_args(argv)
    linkers = sorted(MODES) if args.linker == "both" else [args.linker]
    x_all, y_all = make_data(args.samples, args.features, args.seed)
    mle = full_data_mle(x_all, y_all)
    print(
        "PyMC %s, PyTensor %s: %d rows x %d features, batches of %d, %d ADVI iterations, %d round(s)"
        % (pm.__version__, pytensor.__version__, args.samples, args.features, args.batch, args.iterations, args.rounds)
    )
    fits = {"pm.Minibatch": fit_minibatch, "queue": fit_queue}
    times = {(linker, name): [] for linker in linkers for name in fits}
    for r in range(args.rounds):
        for linker in linkers:
            mode = pytensor.compile.mode.get_mode(MODES[linker])
            for name, run in fits.items():
                ms, means, waited = run(x_all, y_all, args, mode)
                times[linker, name].append(ms)
                rmse = np.sqrt(np.mean((means - mle) ** 2))
                coefficients = " ".join("%.3f" % v for v in means[:4])
                print(
                    "round %d %-5s %-12s %8.1f ms/1000 it  RMSE to MLE %.4f  beta[:4] %s%s"
                    % (r, linker, name, ms, rmse, coefficients, waited)
                )
    print("MLE beta[:4] %s" % " ".join("%.3f" % v for v in mle[:4]))
    print("\n%-6s %-12s %10s %18s %14s" % ("linker", "feeding", "median ms", "spread (min-max)", "queue/Minibatch"))
    for linker in linkers:
        base = np.median(times[linker, "pm.Minibatch"])
        for name in fits:
            ms = times[linker, name]
            print(
                "%-6s %-12s %10.1f %8.1f - %-8.1f %14.2f"
                % (linker, name, np.median(ms), min(ms), max(ms), np.median(ms) / base)
            )
    if args.resume:
        resume_case(x_all, y_all, args, pytensor.compile.mode.get_mode(MODES[linkers[0]]), mle)


if __name__ == "__main__":
    main()
