"""Lasagne's MNIST MLP in plain Theano: its own loops against the queue's feeding (issue 43.6; bench/run.py 30).

    python bench/run.py --only 32 --merge       # the scenario, into the existing results
    python bench/ab.py --old OLD --new . --scenarios lasagne    # the same ways, two trees taking turns

The network of Lasagne's ``examples/mnist.py`` (``build_mlp``): input dropout 0.2, two dense layers of 800
rectifiers with dropout 0.5, a softmax of 10; Glorot-uniform weights; the mean categorical cross-entropy;
Nesterov momentum (learning rate 0.01, momentum 0.9) as ``lasagne.updates.nesterov_momentum`` writes it.
Batches of 500 rows of 784 float32 with **uint8 labels**, as MNIST's loader gives them.  The data are
synthetic digits (ten noisy prototypes: no network, no scikit-learn): what is timed is the feeding and the
step.

The ways, one training step each (the loss read back, as the example's loop does):

own loop   the example's: ``train_fn(inputs, targets)`` over ``iterate_minibatches`` (fancy-indexed batches)
givens     the example's older form: the dataset in ``theano.shared``, ``givens`` slicing minibatch ``i``
arrays     an array-dataset Feeder over (X, y) shuffled, the uint8 labels cast by the queue into int32
generator  a Feeder over the example's ``iterate_minibatches`` generator
held       the array dataset held in GPU memory (``device=True``; GPU only)
"""

import functools

import numpy as np
import theano
import theano.tensor as T
from theano.sandbox.rng_mrg import MRG_RandomStreams

import theano_queue as tq
from bench.generator_step import forever
from bench.rounds import per_call

BATCH, COLS, HIDDEN, CLASSES = 500, 784, 800, 10
#: The ways that do not use the queue: the baselines (and, in an A/B of two trees, the noise floor).
OWN = ("own loop", "givens")


@functools.lru_cache(maxsize=2)
def digits(n, seed=0):
    """(X float32 (n, 784) in [0, 1], y uint8 (n,)): ten smooth 28x28 prototypes with noise, learnable."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(np.arange(28), np.arange(28), indexing="ij"), -1).reshape(1, COLS, 2)
    centres = rng.uniform(4, 24, (CLASSES, 3, 2))  # three strokes' centres per class
    prototypes = np.exp(-((grid[:, :, None, :] - centres[:, None]) ** 2).sum(-1) / 8).max(-1).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.uint8)
    X = rng.standard_normal((n, COLS), dtype=np.float32)
    X *= np.float32(0.3)
    X += prototypes[y]
    return np.clip(X, 0, 1, out=X), y


def dense(rng, n_in, n_out):
    """Glorot-uniform weights (Lasagne's default) and zero biases."""
    bound = np.sqrt(6.0 / (n_in + n_out))
    w = theano.shared(rng.uniform(-bound, bound, (n_in, n_out)).astype("float32"))
    return w, theano.shared(np.zeros(n_out, "float32"))


class Network:
    """``build_mlp``'s parameters, shared by every way's compiled step (each way trains them in turn)."""

    def __init__(self, seed=1):
        rng = np.random.default_rng(seed)
        self.params = [*dense(rng, COLS, HIDDEN), *dense(rng, HIDDEN, HIDDEN), *dense(rng, HIDDEN, CLASSES)]
        self.srng = MRG_RandomStreams(seed)

    def dropout(self, x, p):
        """Lasagne's DropoutLayer in training (rescale=True)."""
        keep = 1.0 - p
        return x * self.srng.binomial(x.shape, p=keep, dtype="float32") / np.float32(keep)

    def loss(self, x, y):
        w1, b1, w2, b2, w3, b3 = self.params
        h = self.dropout(x, 0.2)
        h = self.dropout(T.nnet.relu(T.dot(h, w1) + b1), 0.5)
        h = self.dropout(T.nnet.relu(T.dot(h, w2) + b2), 0.5)
        return T.nnet.categorical_crossentropy(T.nnet.softmax(T.dot(h, w3) + b3), y).mean()

    def updates(self, loss, learning_rate=0.01, momentum=0.9):
        """``lasagne.updates.nesterov_momentum``: an SGD step, then a velocity per parameter."""
        updates = []
        for param, grad in zip(self.params, T.grad(loss, self.params)):
            value = param.get_value(borrow=True)
            velocity = theano.shared(np.zeros(value.shape, value.dtype), broadcastable=param.broadcastable)
            stepped = param - np.float32(learning_rate) * grad
            x = np.float32(momentum) * velocity + stepped - param
            updates += [(velocity, x), (param, np.float32(momentum) * x + stepped)]
        return updates

    def step(self, inputs, x, y, givens=None):
        """The compiled training function: the loss, with the updates."""
        loss = self.loss(x, y)
        return theano.function(inputs, loss, updates=self.updates(loss), givens=givens)


def feeders(q, data, labels):
    """{way: a Feeder factory} of the queue's ways into q: array dataset, generator, and held (GPU queues)."""
    ways = {
        "arrays": lambda: tq.Feeder(
            q, (data, labels), shuffle=True, epochs=None, drop_last=True, close_when_done=False
        ),
        "generator": lambda: tq.Feeder(q, forever(data, labels, BATCH), close_when_done=False),
    }
    if q.on_gpu:
        ways["held"] = lambda: tq.Feeder(
            q, (data, labels), shuffle=True, epochs=None, drop_last=True, close_when_done=False, device=True
        )
    return ways


def fed_seconds(q, feeder, step, calls, blocks):
    """Seconds per call of step() while ``feeder()`` fills q; the queue is reopened for the next way."""
    with feeder():
        seconds = per_call(step, calls, blocks)
    q.close(cancel_pending=True)
    q.reopen()
    return seconds


def read_back(f, *args):
    return float(np.asarray(f(*args)))


class Ways:
    """Every way of training the network on (data, labels), each a callable: its seconds per step."""

    def __init__(self, data, labels, calls, blocks=3):
        net = Network()
        self.queue = tq.Queue([("x", "float32", (BATCH, COLS)), ("y", "int32", (BATCH,))], capacity=3, name="mnist")
        x, y = T.fmatrix("inputs"), T.ivector("targets")
        own = net.step([x, y], x, y)
        shared_x, shared_y = theano.shared(data), theano.shared(labels)
        index = T.lscalar("index")
        rows = slice(index * BATCH, (index + 1) * BATCH)
        givens = net.step([index], x, y, givens={x: shared_x[rows], y: T.cast(shared_y[rows], "int32")})
        fed = net.step([], *self.queue.dequeue())
        batches, count, counter = forever(data, labels, BATCH), len(data) // BATCH, iter(range(1 << 62))
        self.ways = {
            "own loop": lambda: per_call(lambda: read_back(own, *next(batches)), calls, blocks),
            "givens": lambda: per_call(lambda: read_back(givens, next(counter) % count), calls, blocks),
        }
        for name, feeder in feeders(self.queue, data, labels).items():
            self.ways[name] = functools.partial(fed_seconds, self.queue, feeder, lambda: read_back(fed), calls, blocks)


def scenario(b):
    """bench/run.py's scenario 32: the ways in interleaved rounds; each against the example's own loop."""
    from bench.rounds import interleave, summary

    n, calls, rounds = (10000, 40, 3) if b.quick else (60000, 200, 7)
    data, labels = digits(n)
    ways = Ways(data, labels, calls).ways
    times = interleave(ways, rounds)
    own = summary(times["own loop"])["median"]
    rows = []
    for name, values in times.items():
        s = summary(values)
        rows.append(
            {
                "way": name,
                "step ms": 1e3 * s["median"],
                "spread": s["spread"],
                "x own loop": s["median"] / own,
            }
        )
    queued = [r for r in rows if r["way"] not in OWN]
    return {
        "rows": rows,
        "batch": [BATCH, COLS],
        "hidden": HIDDEN,
        "rounds": rounds,
        "target": "every queue way <= 1.0 x the example's own loop",
        "met": all(r["x own loop"] <= 1.0 for r in queued),
        "headline": "step ms (x own loop): "
        + ", ".join("%s %.3f (%.2f)" % (r["way"], r["step ms"], r["x own loop"]) for r in rows),
    }
