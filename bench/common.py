"""What the benchmark scenarios share: timing, sources, small graphs."""

import os
import shlex
import subprocess
import time

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq

MiB = 1 << 20


def time_steps(step, steps, warmup=3):
    """Seconds per call of step(), after warmup calls."""
    for _ in range(warmup):
        step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def busy_wait(step, seconds):
    """Calls step() for `seconds`: a wait (for a ring's copies to land, say) that keeps the GPU as busy as the
    timed steps do.  A sleep would let an H200's clocks drop within milliseconds (to 345 MHz idle), and the
    steps timed after it would pay for the climb back (doc/bench/notes.rst, "The GPU dequeue's host time")."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        step()


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
    return cycle([dataset[i * rows : (i + 1) * rows] for i in range(blocks)], count)


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


def queue_throughput(b, rows, cols, source_kind, dtype="float32", convert=False):
    """Seconds per element through a queue into a graph that reads one value back.

    With convert, the graph first turns the whole batch into float32 in [0, 1]
    and multiplies it by a vector (a first layer's worth of reading it; a
    full reduction would cost Theano more than the transfer).
    """
    itemsize = np.dtype(dtype).itemsize
    nbytes = rows * cols * itemsize
    pool = 4 if nbytes >= 64 * MiB else 8
    data = (b.rng.standard_normal((pool * rows, cols)) * 50).astype(dtype)
    q = tq.Queue([("x", dtype, (rows, cols))], capacity=3, name="throughput")
    x = q.dequeue()
    if convert:
        probe = theano.shared(np.ones(cols, "float32"))
        out = T.dot(T.cast(x, "float32") / np.float32(255), probe)[0]
    else:
        out = x[0, 0]
    f = reading(theano.function([], out))
    steps = b.steps_for(nbytes)
    if source_kind == "registered":
        q.register_host(data)
        source = slices(data, rows)
    else:
        source = cycle([data[i * rows : (i + 1) * rows].copy() for i in range(pool)])
    with tq.Feeder(q, source, close_when_done=False):
        seconds = best_of(lambda: time_steps(f, steps), 2)
    q.close(cancel_pending=True)
    if source_kind == "registered":
        q.unregister_host(data)
    return seconds


def run_torch_peer(torch_python, module, args, timeout):
    """``python -m bench.<module> args`` with the Python that has PyTorch (run.py's ``--torch-python``),
    outside Theano's environment and from the checkout's root: its stdout, and None; or None, and why it did
    not run."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    command = shlex.split(torch_python) + ["-m", "bench." + module] + [str(a) for a in args]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root, timeout=timeout)
    if done.returncode != 0:
        return None, "PyTorch peer did not run: %s" % done.stderr.strip()[-500:]
    return done.stdout, None
