"""Scenario 18 of bench/run.py: variable-length sequences (issue 12).

Sequences of 128 float32 features per step, lengths lognormal with a long
tail up to 512, batches of 64.  Three ways through the queue, each timed on
the same training-like step (a dense layer on every step, a masked mean over
time, the loss read back):

* padded on the host to the global bound: a fixed ``(64, 512, 128)`` component
  and an int64 lengths component, what users do without variable axes;
* ``tq.upto(512)``: each batch crosses padded to its own longest sequence;
* ``tq.upto(512)`` with the batches bucketed by length (the Feeder's
  ``bucket_by``, window 16 batches): little padding is left.

Reported per batch: bytes over the bus (the queue's ``bytes_in``), the mean
extent the graph sees, and the step time.  The batches are built before the
timing (a pool, cycled), so the figures are the queue's and the step's, not
the producer's Python.  Runs on the CPU too (a host queue: "bus" is then the
copy into the slot).
"""

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq
from bench.common import MiB, best_of, cycle, reading, time_steps
from theano_queue.sampler import Sampler

BOUND, FEATURES, BATCH, HIDDEN = 512, 128, 64, 256


def lognormal_lengths(count, rng):
    """A long tail: median 64, a few sequences at the bound."""
    return np.clip(rng.lognormal(np.log(64), 0.9, count), 1, BOUND).astype(np.int64)


def batches_of(order, lengths, rng):
    """Padded(data, lengths) batches of BATCH samples in ``order``, each padded to its own longest."""
    out = []
    for start in range(0, len(order) - BATCH + 1, BATCH):
        rows = lengths[order[start : start + BATCH]]
        data = np.zeros((BATCH, int(rows.max()), FEATURES), np.float32)
        for i, n in enumerate(rows):
            data[i, :n] = rng.standard_normal((n, FEATURES), dtype=np.float32)
        out.append(tq.Padded(data, rows))
    return out


def at_the_bound(batch):
    data = np.zeros((BATCH, BOUND, FEATURES), np.float32)
    data[:, : batch.data.shape[1]] = batch.data
    return data, batch.lengths


def step_graph(x, lengths, rng):
    """A dense layer on every step, the masked mean over time, a scalar loss."""
    w = theano.shared((rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype("float32"))
    steps = x.shape[1]
    h = T.tanh(T.dot(x.reshape((x.shape[0] * steps, FEATURES)), w)).reshape((x.shape[0], steps, HIDDEN))
    mask = T.cast(T.lt(T.arange(steps).dimshuffle("x", 0), lengths.dimshuffle(0, "x")), "float32")
    pooled = (h * mask.dimshuffle(0, 1, "x")).sum(axis=1) / T.maximum(lengths, 1).astype("float32").dimshuffle(0, "x")
    return (pooled**2).mean()


def measure(q, outputs, batches, steps):
    """(ms per step, bytes over the bus per batch, mean extent) feeding ``batches`` in a cycle."""
    loss, extent = outputs
    f = theano.function([], [loss, extent])
    step = reading(lambda: f()[0])
    before = q.stats()
    with tq.Feeder(q, cycle(batches), close_when_done=False):
        seconds = best_of(lambda: time_steps(step, steps), 2)
        extents = [int(f()[1]) for _ in range(min(len(batches), 64))]
    q.close(cancel_pending=True)
    after = q.stats()
    per_batch = (after["bytes_in"] - before["bytes_in"]) / max(1, after["enqueued"] - before["enqueued"])
    return seconds, per_batch, float(np.mean(extents))


def sequences(b):
    rng = np.random.default_rng(12)
    count = 64 * BATCH if b.quick else 256 * BATCH
    steps = 20 if b.quick else 200
    lengths = lognormal_lengths(count, rng)
    shuffled = rng.permutation(count)
    plain = batches_of(shuffled, lengths, rng)
    sampler = Sampler(count, BATCH, shuffle=True, seed=12, bucket_by=lambda i: lengths[i], bucket_window=16)
    bucketed = batches_of(sampler.epoch_indices(0), lengths, rng)
    pool = 16 if b.quick else 32  # batches at the bound take 16 MiB each

    table = []
    fixed = tq.Queue(
        [("x", "float32", (BATCH, BOUND, FEATURES)), ("lengths", "int64", (BATCH,))], capacity=3, name="bound"
    )
    x, lens = fixed.dequeue()
    seconds, nbytes, extent = measure(
        fixed,
        (step_graph(x, lens, np.random.default_rng(1)), x.shape[1]),
        [at_the_bound(p) for p in plain[:pool]],
        steps,
    )
    bound = {"s": seconds, "bytes": nbytes}
    table.append(
        {
            "what": "padded to the bound on the host, (64, 512, 128)",
            "MiB/batch": nbytes / MiB,
            "mean extent": extent,
            "step ms": 1e3 * seconds,
        }
    )
    for what, batches in (
        ("tq.upto(512): each batch's own extent", plain),
        ("tq.upto(512) + bucket_by (window 16 batches)", bucketed),
    ):
        q = tq.Queue([("x", "float32", (BATCH, tq.upto(BOUND), FEATURES))], capacity=3, name="upto")
        x, lens = q.dequeue(lengths=True)
        chosen = [batches[i] for i in np.random.default_rng(3).permutation(len(batches))[: pool * 4]]
        seconds, nbytes, extent = measure(q, (step_graph(x, lens, np.random.default_rng(1)), x.shape[1]), chosen, steps)
        table.append(
            {
                "what": what,
                "MiB/batch": nbytes / MiB,
                "mean extent": extent,
                "step ms": 1e3 * seconds,
                "x bound bytes": nbytes / bound["bytes"],
                "x bound step": seconds / bound["s"],
            }
        )
    used = float(lengths.mean() * BATCH * FEATURES * 4 / MiB)
    table.append(
        {
            "what": "the sequences' own bytes (no padding at all)",
            "MiB/batch": used,
            "x bound bytes": used * MiB / bound["bytes"],
        }
    )
    plain_row, bucket_row = table[1], table[2]
    return {
        "rows": table,
        "lengths": {
            "median": float(np.median(lengths)),
            "mean": float(lengths.mean()),
            "p99": float(np.percentile(lengths, 99)),
            "max": int(lengths.max()),
        },
        "headline": "bytes over the bus %.2f x (bucketed %.2f x) padding to the bound; step %.2f x (bucketed "
        "%.2f x)"
        % (
            plain_row["x bound bytes"],
            bucket_row["x bound bytes"],
            plain_row["x bound step"],
            bucket_row["x bound step"],
        ),
        "target": "bytes and step time well below the bound's (bucketed: near the sequences' own bytes)",
    }
