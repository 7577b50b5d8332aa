"""Keras 2.3.1 ``fit`` fed by numpy arrays against the same model fed by a Queue, seconds per epoch.

    python -m bench.keras_bench --rounds 3            # the MLP of doc/keras.rst (60000 x 784, batch 250)

Each way has its own model, built and compiled once; the rounds then run one
epoch of each way in turn (the order rotated per round), so the machine's
drift falls on all of them alike.  The ways: ``numpy`` (``fit(X, Y)``, Keras
slicing and copying each batch), ``arrays`` (an array-dataset Feeder,
shuffled), and on a GPU ``held`` (the same with ``device=True``).  The data
are random, MNIST's shapes: what is timed is the feeding and the step, not
the accuracy.
"""

import argparse
import statistics
import time

import numpy as np

import theano_queue as tq
import theano_queue.keras as tqk  # before keras: its Python 3.11 aliases and Theano backend

try:
    from theano_queue.core.target import theano_gpu_contexts
except ImportError:  # a tree from before the layers (issue 42), as bench/ab.py's old tree can be
    from theano_queue.target import theano_gpu_contexts

# isort: split
import keras
from keras import layers


def mlp(inputs, hidden):
    h = layers.Dense(hidden, activation="relu")(inputs)
    return layers.Dense(10, activation="softmax")(h)


def numpy_way(X, Y, batch, hidden):
    inputs = keras.Input(shape=X.shape[1:])
    model = keras.Model(inputs, mlp(inputs, hidden))
    model.compile("sgd", "sparse_categorical_crossentropy")

    def epoch():
        model.fit(X, Y, batch_size=batch, epochs=1, shuffle=True, verbose=0)

    return epoch


def queue_way(X, Y, batch, hidden, device):
    q = tq.Queue([("x", "float32", (batch,) + X.shape[1:]), ("y", "int32", (batch,))], capacity=4)
    x, y = q.dequeue()
    inputs = keras.Input(tensor=x)
    model = keras.Model(inputs, mlp(inputs, hidden))
    model.compile("sgd", "sparse_categorical_crossentropy", target_tensors=[y])
    steps = len(X) // batch

    def epoch():
        with tq.Feeder(q, (X, Y), shuffle=True, drop_last=True, device=device):
            model.fit(epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[tqk.QueueEnd(q)])
        q.reopen()

    return epoch


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=60000, help="training rows")
    parser.add_argument("--batch", type=int, default=250, help="rows per step")
    parser.add_argument("--hidden", type=int, default=256, help="hidden units of the MLP")
    parser.add_argument("--rounds", type=int, default=3, help="epochs of each way, interleaved")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.random((args.rows, 784), dtype=np.float32)
    Y = rng.integers(0, 10, args.rows).astype("int32")
    ways = {
        "numpy": numpy_way(X, Y, args.batch, args.hidden),
        "arrays": queue_way(X, Y, args.batch, args.hidden, False),
    }
    if theano_gpu_contexts():
        ways["held"] = queue_way(X, Y, args.batch, args.hidden, True)
    for epoch in ways.values():  # compiles, and warms every path once
        epoch()
    seconds = {name: [] for name in ways}
    names = list(ways)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            began = time.perf_counter()
            ways[name]()
            seconds[name].append(time.perf_counter() - began)
    base = statistics.median(seconds["numpy"])
    print("Keras MLP %dx784, hidden %d, batch %d, %d rounds" % (args.rows, args.hidden, args.batch, args.rounds))
    for name, values in seconds.items():
        median = statistics.median(values)
        print(
            "%-7s %.3f s/epoch (%.3f-%.3f)  numpy / this %.2f" % (name, median, min(values), max(values), base / median)
        )


if __name__ == "__main__":
    main()
