"""The tutorial's worker example, whole: a map-style dataset decoded by worker processes.

    python examples/train_workers.py [--epochs N] [--workers N]

Workers are started with spawn: each one imports this script again, so
everything but the dataset's class sits under the ``__main__`` guard.  Built
at the module's top level, the model would be compiled again in every worker
before it could deliver its first batch (about 35 s instead of 1-3 s on a
2-core machine).  It prints how long the first batch took, then the loss.
"""

import argparse
import time

import numpy as np


class Noisy:
    """Sample i: a digit's features with some noise added (the 'augmentation'), and its label."""

    def __init__(self, features, labels):
        self.features, self.labels = features, labels

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        noise = np.random.standard_normal(self.features.shape[1]).astype("float32")
        return self.features[i] + np.float32(0.05) * noise, self.labels[i]


def make_data(n=1000, n_in=20, n_out=3, seed=0):
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((n, n_in)).astype("float32")
    labels = np.argmax(features @ rng.standard_normal((n_in, n_out)), axis=1).astype("int32")
    return features, labels


def build_model(q, n_in, n_out):
    """A softmax regression trained on the queue's batches: the step takes no arguments."""
    import theano
    import theano.tensor as T

    x, y = q.dequeue()
    w = theano.shared(np.zeros((n_in, n_out), "float32"), name="w")
    b = theano.shared(np.zeros(n_out, "float32"), name="b")
    p = T.nnet.softmax(T.dot(x, w) + b)
    loss = T.nnet.categorical_crossentropy(p, y).mean()
    updates = [(v, v - np.float32(0.5) * g) for v, g in zip([w, b], T.grad(loss, [w, b]))]
    return theano.function([], loss, updates=updates)


def main():
    import theano_queue as tq

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    features, labels = make_data()
    q = tq.Queue([("x", "float32", (64, features.shape[1])), ("y", "int32", (64,))], capacity=4, name="train")
    train_step = build_model(q, features.shape[1], 3)
    started = time.perf_counter()
    with tq.Feeder(q, Noisy(features, labels), workers=args.workers, shuffle=True, epochs=args.epochs) as feeder:
        loss = train_step()
        print("first batch after %.2f s" % (time.perf_counter() - started), flush=True)
        for _ in range(args.epochs * feeder.batches_per_epoch - 1):
            loss = train_step()
    print("loss %.3f" % loss)


if __name__ == "__main__":  # workers import this script again: everything but the dataset's class goes here
    main()
