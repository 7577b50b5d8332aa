"""Train a small LSTM on synthetic variable-length sequences, fed through a theano_queue.Queue.

    python examples/train_lstm.py --epochs 4

Each sequence holds tokens from a small vocabulary, its length drawn from a
long-tailed (lognormal) distribution up to --max-len; its label says whether
most of its tokens lie in the low half of the vocabulary.  The queue's
``tokens`` component is ``(batch, tq.upto(max_len))``: every batch crosses
padded only to its own longest sequence, and the Feeder groups sequences of
similar length (``bucket_by``) so that little padding is left.  The graph
takes ``tokens, labels, lengths = q.dequeue(lengths=True)``, makes the mask
with one comparison, and runs the LSTM with ``theano.scan`` over the batch's
own length: a padded step leaves the state as it was.

It runs on the GPU when THEANO_FLAGS selects one (device=cuda0), else on the
CPU; the code is the same.
"""

import argparse
import sys
import time

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq

VOCAB = 8

# Theano 1.0.5 builds scan's inner loop from Cython output that Python 3.11
# cannot compile.  Scan falls back to its Python loop (the step itself stays
# compiled) when that module cannot be imported, which this entry makes so;
# the project's venv does the same for every script (scripts/install-deps.sh),
# and this line keeps the example running on other stacks.
sys.modules.setdefault("theano.scan_module.scan_perform_ext", None)


class Sequences:
    """Map-style: sample i is (tokens of their own length, label), drawn from i and the seed."""

    def __init__(self, count, max_len, seed):
        self.count, self.max_len, self.seed = count, max_len, seed

    def __len__(self):
        return self.count

    def draw_length(self, rng):
        return int(np.clip(rng.lognormal(np.log(12), 0.6), 1, self.max_len))

    def length(self, i):
        """Sample i's length, without drawing its tokens."""
        return self.draw_length(np.random.default_rng([self.seed, i]))

    def __getitem__(self, i):
        rng = np.random.default_rng([self.seed, i])
        n = self.draw_length(rng)
        low = rng.uniform(0.2, 0.8)  # the share of low tokens this sequence draws from
        tokens = np.where(rng.random(n) < low, rng.integers(0, VOCAB // 2, n), rng.integers(VOCAB // 2, VOCAB, n))
        label = np.int32(2 * np.count_nonzero(tokens < VOCAB // 2) > n)
        return tokens.astype("int32"), label


def floatx(a):
    return np.asarray(a, dtype=theano.config.floatX)


def lstm_parameters(n_in, n_hidden, rng):
    scale = 1.0 / np.sqrt(n_hidden)
    return {
        "embed": theano.shared(floatx(rng.normal(0, 1, (VOCAB, n_in))), name="embed"),
        "W": theano.shared(floatx(rng.uniform(-scale, scale, (n_in, 4 * n_hidden))), name="W"),
        "U": theano.shared(floatx(rng.uniform(-scale, scale, (n_hidden, 4 * n_hidden))), name="U"),
        "b": theano.shared(floatx(np.r_[np.zeros(n_hidden), np.ones(n_hidden), np.zeros(2 * n_hidden)]), name="b"),
        "out_w": theano.shared(floatx(np.zeros(n_hidden)), name="out_w"),
        "out_b": theano.shared(floatx(0.0), name="out_b"),
    }


def lstm_logits(tokens, lengths, p, n_hidden):
    """The LSTM's logit per row: scan over the batch's steps, a padded step keeps the row's state."""
    mask = T.lt(T.arange(tokens.shape[1]).dimshuffle(0, "x"), lengths.dimshuffle("x", 0))  # (steps, rows)
    mask = T.cast(mask, theano.config.floatX)
    inputs = T.dot(p["embed"][tokens.T], p["W"]) + p["b"]  # (steps, rows, 4 * hidden)

    def step(x, m, h, c):
        gates = x + T.dot(h, p["U"])
        i, f = T.nnet.sigmoid(gates[:, :n_hidden]), T.nnet.sigmoid(gates[:, n_hidden : 2 * n_hidden])
        o, g = T.nnet.sigmoid(gates[:, 2 * n_hidden : 3 * n_hidden]), T.tanh(gates[:, 3 * n_hidden :])
        c_new = f * c + i * g
        h_new = o * T.tanh(c_new)
        m = m.dimshuffle(0, "x")
        return m * h_new + (1 - m) * h, m * c_new + (1 - m) * c

    zeros = T.zeros((tokens.shape[0], n_hidden), dtype=theano.config.floatX)
    (h, _), _ = theano.scan(step, sequences=[inputs, mask], outputs_info=[zeros, zeros])
    return T.dot(h[-1], p["out_w"]) + p["out_b"]


def build(q, n_in, n_hidden, learning_rate, rng):
    """The training step: no inputs; it dequeues a batch and returns its mean loss and accuracy."""
    tokens, labels, lengths = q.dequeue(lengths=True)
    p = lstm_parameters(n_in, n_hidden, rng)
    logits = lstm_logits(tokens, lengths, p, n_hidden)
    target = T.cast(labels, theano.config.floatX)
    loss = T.nnet.binary_crossentropy(T.nnet.sigmoid(logits), target).mean()
    accuracy = T.eq(T.gt(logits, 0), T.eq(labels, 1)).mean()
    updates = adam(loss, list(p.values()), learning_rate)
    return theano.function([], [loss, accuracy], updates=updates)


def adam(loss, params, learning_rate, b1=0.9, b2=0.999, eps=1e-8):
    t = theano.shared(floatx(0.0), name="t")
    t_new = t + 1
    updates = [(t, t_new)]
    lr = learning_rate * T.sqrt(1 - b2**t_new) / (1 - b1**t_new)
    for param, grad in zip(params, T.grad(loss, params)):
        m = theano.shared(floatx(np.zeros(param.get_value().shape)))
        v = theano.shared(floatx(np.zeros(param.get_value().shape)))
        m_new, v_new = b1 * m + (1 - b1) * grad, b2 * v + (1 - b2) * grad**2
        updates += [(m, m_new), (v, v_new), (param, param - T.cast(lr, param.dtype) * m_new / (T.sqrt(v_new) + eps))]
    return updates


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    dataset = Sequences(args.samples, args.max_len, args.seed)
    q = tq.Queue(
        [("tokens", "int32", (args.batch, tq.upto(args.max_len))), ("label", "int32", (args.batch,))],
        capacity=4,
        name="sequences",
    )
    train = build(q, 16, args.hidden, floatx(args.learning_rate), np.random.default_rng(args.seed))
    # The lengths are known without reading the samples: bucket_by takes them as an array.
    lengths = np.array([dataset.length(i) for i in range(len(dataset))])
    losses = []
    for epoch in range(1, args.epochs + 1):
        started, batch_losses, batch_accuracy = time.perf_counter(), [], []
        if q.closed:  # the last epoch's Feeder closed it
            q.reopen()
        with tq.Feeder(q, dataset, shuffle=True, seed=args.seed + epoch, bucket_by=lengths):
            while True:
                try:
                    loss, accuracy = train()
                except tq.QueueClosed:
                    break
                batch_losses.append(float(loss))
                batch_accuracy.append(float(accuracy))
        losses.append(float(np.mean(batch_losses)))
        print(
            "epoch %d  loss %.4f  accuracy %.3f  (%d batches, %.1f s)"
            % (epoch, losses[-1], np.mean(batch_accuracy), len(batch_losses), time.perf_counter() - started),
            flush=True,
        )
    stats = q.stats()
    print(
        "bytes over the bus %.2f MB for %d batches (the queue's bytes_in)"
        % (stats["bytes_in"] / 1e6, stats["enqueued"])
    )
    return {"losses": losses, "stats": stats}


if __name__ == "__main__":
    main()
