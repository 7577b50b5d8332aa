"""Train a small classifier on scikit-learn's digits, fed through a theano_queue.Queue.

    theano-queue demo                # or: make demo, python examples/train_digits.py --epochs 30

The training function has no inputs: it dequeues each minibatch inside the
compiled graph, while a Feeder fills the queue from a background thread.  One
compiled function serves every epoch (the queue is reopened between them).
It runs on the GPU when THEANO_FLAGS selects one (device=cuda0), else on the
CPU; the code is the same.  With --progress each epoch shows the queue's
monitor line and ends with its verdict (input-bound or compute-bound).
"""

import argparse
import gzip
import os
import sys
import time

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq
from theano_queue._engine import MAX_CAPACITY
from theano_queue.core.arguments import int_at_least, positive_float

# The demo's data: scikit-learn ships it; the CSV is the same file, for machines without it.
DIGITS_HELP = (
    "needs scikit-learn (pip install 'theano_queue[demo]'), or "
    "THEANO_QUEUE_DIGITS_CSV=path/to/sklearn/datasets/data/digits.csv.gz"
)


def load_digits():
    """(images as float32 in [0, 1], labels as int32): 1797 8x8 digits."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:  # the same file, where scikit-learn is not importable
        path = os.environ.get("THEANO_QUEUE_DIGITS_CSV")
        if not path:
            sys.exit("demo: " + DIGITS_HELP)
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",")
        return (table[:, :-1] / 16.0).astype("float32"), table[:, -1].astype("int32")
    digits = sklearn_digits()
    return (digits.data / 16.0).astype("float32"), digits.target.astype("int32")


def split(x, y, test_fraction, rng):
    order = rng.permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return (x[train], y[train]), (x[test], y[test])


def minibatches(x, y, batch_size, rng):
    """One epoch of shuffled minibatches; the last one may be shorter."""
    order = rng.permutation(len(x))
    for start in range(0, len(x), batch_size):
        chosen = order[start : start + batch_size]
        yield x[chosen], y[chosen]


def build_mlp(x, n_in, n_hidden, n_out, rng):
    """Parameters and class probabilities of a one-hidden-layer perceptron."""

    def weights(n_rows, n_cols):
        scale = np.sqrt(2.0 / n_rows)
        return theano.shared((scale * rng.standard_normal((n_rows, n_cols))).astype("float32"))

    w1, b1 = weights(n_in, n_hidden), theano.shared(np.zeros(n_hidden, "float32"))
    w2, b2 = weights(n_hidden, n_out), theano.shared(np.zeros(n_out, "float32"))
    hidden = T.nnet.relu(T.dot(x, w1) + b1)
    return [w1, b1, w2, b2], T.nnet.softmax(T.dot(hidden, w2) + b2)


def sgd_momentum(cost, params, learning_rate, momentum=0.9):
    # Python floats would make the updates float64 under Theano's default floatX.
    learning_rate, momentum = np.float32(learning_rate), np.float32(momentum)
    updates = []
    for param, grad in zip(params, T.grad(cost, params)):
        velocity = theano.shared(np.zeros_like(param.get_value()))
        step = momentum * velocity - learning_rate * grad
        updates += [(velocity, step), (param, param + step)]
    return updates


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    option = parser.add_argument
    option("--epochs", type=int_at_least(1), default=30, help="passes over the training digits (default 30)")
    option("--batch-size", type=int_at_least(1), default=64, help="digits per step, the queue's batch (default 64)")
    option("--hidden", type=int_at_least(1), default=128, help="units of the perceptron's hidden layer (default 128)")
    option("--learning-rate", type=positive_float, default=0.05, help="SGD's step, with momentum 0.9 (default 0.05)")
    option(
        "--capacity",
        type=int_at_least(1, MAX_CAPACITY),
        default=4,
        help="batches the queue holds ahead of the model, 1 to %d (default 4)" % MAX_CAPACITY,
    )
    option("--seed", type=int_at_least(0), default=0, help="seed of the weights, the split and the shuffle (default 0)")
    option("--progress", action="store_true", help="show the queue's monitor line and verdict for every epoch")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    (x_train, y_train), (x_test, y_test) = split(*load_digits(), test_fraction=0.2, rng=rng)
    if args.batch_size > len(x_train):
        parser.error(
            "argument --batch-size: expected at most %d (the training digits), got %d" % (len(x_train), args.batch_size)
        )
    n_in, n_out = x_train.shape[1], 10

    queue = tq.Queue(
        [("x", "float32", (args.batch_size, n_in)), ("y", "int32", (args.batch_size,))],
        capacity=args.capacity,
        name="digits",
    )
    print("theano device %s; queue %r" % (theano.config.device, queue))

    # The training graph starts at the queue: no inputs to the function.
    x, y = queue.dequeue()
    params, probabilities = build_mlp(x, n_in, args.hidden, n_out, rng)
    loss = T.nnet.categorical_crossentropy(probabilities, y).mean()
    correct = T.eq(T.argmax(probabilities, axis=1), y).sum()
    train_step = theano.function(
        [], [loss, correct, y.shape[0]], updates=sgd_momentum(loss, params, args.learning_rate)
    )

    # Evaluation reuses the model on the whole test set, given as an input.
    x_eval, y_eval = T.fmatrix("x_eval"), T.ivector("y_eval")
    evaluate = theano.function(
        [x_eval, y_eval],
        T.eq(T.argmax(theano.clone(probabilities, {x: x_eval}), axis=1), y_eval).mean(),
    )

    test_accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        started, total_loss, total_correct, seen = time.perf_counter(), 0.0, 0, 0
        with tq.Feeder(queue, minibatches(x_train, y_train, args.batch_size, rng), progress=args.progress):
            while True:
                try:
                    batch_loss, batch_correct, batch_rows = train_step()
                except tq.QueueClosed:  # the epoch's last batch is done
                    break
                total_loss += float(batch_loss) * int(batch_rows)
                total_correct += int(batch_correct)
                seen += int(batch_rows)
        queue.reopen()
        test_accuracy = float(evaluate(x_test, y_test))
        print(
            "epoch %2d  loss %.4f  train acc %.3f  test acc %.3f  %5.1f ms"
            % (epoch, total_loss / seen, total_correct / seen, test_accuracy, 1e3 * (time.perf_counter() - started))
        )

    stats = queue.stats()
    print(
        "queue: %(enqueued)d batches in, %(dequeued)d out, %(bytes_in)d bytes; the model waited "
        "%(consumer_wait_s).3f s for data, puts were blocked %(producer_wait_s).3f s for a free slot" % stats
    )
    print("final test accuracy %.3f" % test_accuracy)
    return {"test_accuracy": test_accuracy, "stats": stats}


if __name__ == "__main__":
    main()
