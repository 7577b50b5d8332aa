"""What the benchmark scenarios share: timing, sources, small graphs."""
import time

import numpy as np
import theano
import theano.tensor as T

MiB = 1 << 20


def time_steps(step, steps, warmup=3):
    """Seconds per call of step(), after warmup calls."""
    for _ in range(warmup):
        step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def best_of(measure, repeats=3):
    """The smallest of a few measurements: the machine's noise only ever adds time."""
    return min(measure() for _ in range(repeats))


def cycle(batches, count=None):
    """Yield the batches over and over (count elements, or forever)."""
    i = 0
    while count is None or i < count:
        yield batches[i % len(batches)]
        i += 1


def slices(dataset, rows, count=None):
    """Consecutive row blocks of one big array, over and over: views, no copies."""
    blocks = len(dataset) // rows
    return cycle([dataset[i * rows:(i + 1) * rows] for i in range(blocks)], count)


def layer(x, cols, width, rng):
    """tanh(x . W).mean() with W of (cols, width): compute whose cost grows with width."""
    w = theano.shared((rng.standard_normal((cols, width)) / np.sqrt(cols)).astype("float32"))
    return T.tanh(T.dot(x, w)).mean()


def mlp_train_step(x, y, n_in, n_hidden, n_out, rng, lr=0.01):
    """Loss and SGD updates of a 3-layer float32 perceptron."""
    def weights(n_rows, n_cols):
        w = theano.shared((rng.standard_normal((n_rows, n_cols)) * np.sqrt(2.0 / n_rows)).astype("float32"))
        return w, theano.shared(np.zeros(n_cols, "float32"))

    params = [*weights(n_in, n_hidden), *weights(n_hidden, n_hidden), *weights(n_hidden, n_out)]
    w1, b1, w2, b2, w3, b3 = params
    h = T.nnet.relu(T.dot(x, w1) + b1)
    h = T.nnet.relu(T.dot(h, w2) + b2)
    loss = T.nnet.categorical_crossentropy(T.nnet.softmax(T.dot(h, w3) + b3), y).mean()
    updates = [(p, p - np.float32(lr) * g) for p, g in zip(params, T.grad(loss, params))]
    return loss, updates


def reading(f):
    """A step that reads f's (scalar) result back to the host: its time is real, not queued."""
    return lambda: float(np.asarray(f()))
