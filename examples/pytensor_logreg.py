"""Logistic regression by minibatch SGD in plain PyTensor: the queue against the shared-variable idiom.

    make pytensor-deps && .venv-pytensor/bin/python examples/pytensor_logreg.py [--linker c]

Both loops make the same SGD steps over shuffled batches, each with its own
permutation per epoch (with ``--no-shuffle`` they take the same batches in
the same order and their loss curves agree to the last digit); what differs
is how a batch gets into the compiled step:

* **queue**: the step has no inputs; ``q.dequeue()`` takes the next batch
  inside the graph while a :class:`~theano_queue.Feeder` gathers the following
  rows into the queue's slots from native threads, without the GIL;
* **set_value**: the step reads two shared variables that the loop refills
  from Python before every call (gathering the batch's rows first): what
  ``pm.Data``/``set_data`` and the streaming-VI recipes do.

(``pm.fit`` against ``pm.Minibatch`` is examples/pymc_advi.py, on PyMC 5.28.5
and the PyTensor 2.38 it pins: no PyMC release runs on PyTensor 3.0.)  Run it with the installed package
(``make test-pytensor`` installs it into .venv-pytensor); from the checkout's
root add ``-P`` (or PYTHONSAFEPATH=1) so that the installed copy is imported.
"""

import argparse
import time

import numpy as np
import pytensor
import pytensor.tensor as pt

import theano_queue.pytensor as tq

MODES = {"numba": "NUMBA", "c": "CVM"}


def make_data(n, d, seed=0):
    """n samples of d features whose labels come from a known logistic model."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d), dtype=np.float32)
    w = rng.standard_normal(d).astype(np.float32) / np.sqrt(d) * 3
    y = (rng.random(n) < 1 / (1 + np.exp(-x @ w))).astype(np.int32)
    return x, y


def sgd_step(x, y, params, lr):
    """The batch's mean log-loss, and the updates of one SGD step on it."""
    w, b = params
    logits = pt.dot(x, w) + b
    loss = pt.mean(pt.softplus(logits) - y * logits)
    grads = pytensor.grad(loss, params)
    return loss, [(p, p - lr * g) for p, g in zip(params, grads)]


def fresh_params(d):
    return [pytensor.shared(np.zeros(d, "float32"), name="w"), pytensor.shared(np.float32(0), name="b")]


def train_with_queue(x_all, y_all, batch, epochs, lr, mode, shuffle):
    q = tq.Queue([("x", "float32", (batch, x_all.shape[1])), ("y", "int32", (batch,))], capacity=4)
    x, y = q.dequeue()
    params = fresh_params(x_all.shape[1])
    loss, updates = sgd_step(x, y, params, lr)
    step = pytensor.function([], loss, updates=updates, mode=mode)
    losses, times = [], []
    with tq.Feeder(q, (x_all, y_all), epochs=epochs, shuffle=shuffle, seed=1):
        while True:
            start = time.perf_counter()
            try:
                losses.append(float(step()))
            except tq.QueueClosed:
                break
            times.append(time.perf_counter() - start)
    return losses, times, params


def train_with_set_value(x_all, y_all, batch, epochs, lr, mode, shuffle):
    xs = pytensor.shared(x_all[:batch].copy(), name="x_batch")
    ys = pytensor.shared(y_all[:batch].copy(), name="y_batch")
    params = fresh_params(x_all.shape[1])
    loss, updates = sgd_step(xs, ys, params, lr)
    step = pytensor.function([], loss, updates=updates, mode=mode)
    losses, times = [], []
    rng = np.random.default_rng(1)
    for _ in range(epochs):
        order = rng.permutation(len(x_all)) if shuffle else np.arange(len(x_all))
        for s in range(0, len(x_all), batch):
            start = time.perf_counter()
            rows = order[s : s + batch] if shuffle else slice(s, s + batch)
            xs.set_value(x_all[rows], borrow=True)
            ys.set_value(y_all[rows], borrow=True)
            losses.append(float(step()))
            times.append(time.perf_counter() - start)
    return losses, times, params


def accuracy(params, x_all, y_all):
    w, b = (p.get_value() for p in params)
    return float(np.mean(((x_all @ w + b) > 0) == y_all))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linker", choices=sorted(MODES), default="numba")
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="the same batches in both loops")
    args = parser.parse_args(argv)
    mode = pytensor.compile.mode.get_mode(MODES[args.linker])
    x_all, y_all = make_data(args.samples, args.features)
    print(
        "PyTensor %s, linker %s: %d samples x %d features, batches of %d, %d epochs, %s"
        % (
            pytensor.__version__,
            args.linker,
            args.samples,
            args.features,
            args.batch,
            args.epochs,
            "shuffled" if args.shuffle else "in order",
        )
    )
    runs = {}
    for name, train in (("queue", train_with_queue), ("set_value", train_with_set_value)):
        runs[name] = train(x_all, y_all, args.batch, args.epochs, args.lr, mode, args.shuffle)
    every = max(1, len(runs["queue"][0]) // 8)
    print("\nmean batch loss, by step:\n%8s %10s %10s" % ("step", "queue", "set_value"))
    for s in range(0, len(runs["queue"][0]), every):
        print("%8d %10.4f %10.4f" % (s, *(np.mean(runs[n][0][s : s + every]) for n in ("queue", "set_value"))))
    print("\n%-10s %6s %10s %10s %9s %9s" % ("feeding", "steps", "median us", "mean us", "loop s", "accuracy"))
    for name, (losses, times, params) in runs.items():
        # The first step is left out: Numba compiles the graph at its first call.
        steady = np.array(times[1:])
        print(
            "%-10s %6d %10.1f %10.1f %9.3f %9.4f"
            % (
                name,
                len(losses),
                np.median(steady) * 1e6,
                steady.mean() * 1e6,
                steady.sum(),
                accuracy(params, x_all, y_all),
            )
        )


if __name__ == "__main__":
    main()
