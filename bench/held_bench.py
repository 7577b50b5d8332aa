"""Scenario 22 of bench/run.py: an array dataset held in GPU memory, ``Feeder(..., device=True)`` (issue 21.3).

Shuffled 256 MiB batches of 16 KiB rows from a 2 GiB dataset (64 MiB batches of a 256 MiB one with --quick),
side by side in one run:

* the rate at which batches reach a graph that reads one value of each (medians of 3 rounds, the three gathers
  in turn): the dataset gathered on the GPU
  (``device=True``) against the PCIe limit (scenario 1's figure where it ran first, else measured here), against
  the same dataset gathered on the host (the default array dataset), and against the gather a Theano user writes
  without the queue: the dataset in a ``theano.shared``, a shuffled minibatch indexed inside the graph;
* a 3-layer MLP step on those batches: fed by ``device=True``, against the same step on a batch already resident
  in a shared variable, and against that shared-variable idiom.

Both take ``device=True`` two ways: as the engine chooses for a batch this large (the Feeder gathers it on the
queue's copy stream, beside the step), and gathered by the dequeue on the step's own stream, as batches of up to
2 MiB are (``_engine.set_held_gather_in_step``).
"""

import statistics

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq
from bench.common import MiB, best_of, mlp_train_step, reading, time_steps
from theano_queue import _engine

try:
    from theano_queue.tools.probe import h2d_seconds
except ImportError:  # a tree from before the layers (issue 42), as bench/ab.py's old tree can be
    from theano_queue.probe import h2d_seconds

HIDDEN = 1024


def sizes(quick):
    """(dataset rows, batch rows, row elements): 16 KiB float32 rows; 256 MiB batches (64 MiB with --quick)."""
    return (16384, 4096, 4096) if quick else (131072, 16384, 4096)


def pcie_gbps(b, nbytes):
    """Scenario 1's pinned host-to-device rate at this size where it ran in this run, else measured now."""
    known = getattr(b, "limit", {})
    if nbytes // MiB in known:
        return known[nbytes // MiB]
    return nbytes / best_of(lambda: h2d_seconds(nbytes, b.steps_for(nbytes, 4096))) / 1e9


def fed_seconds(q, step, data, labels, steps, device, in_step=False):
    """Seconds per call of step() while an endless shuffled Feeder over (data, labels) fills q; with
    ``in_step``, a held batch of any size is gathered by the dequeue on the step's stream (by default only
    batches of up to 2 MiB are, larger ones by the Feeder on the copy stream)."""
    was = _engine.set_held_gather_in_step(1 << 62) if in_step else None
    try:
        with tq.Feeder(
            q, (data, labels), shuffle=True, epochs=None, drop_last=True, close_when_done=False, device=device
        ) as feeder:
            seconds = best_of(lambda: time_steps(step, steps), 2)
            gather = feeder.stats()["gather"]
    finally:
        if was is not None:
            _engine.set_held_gather_in_step(was)
    q.close(cancel_pending=True)
    q.reopen()
    return seconds, gather


class SharedIdiom:
    """The dataset in theano.shared and a permutation; minibatch ``k`` is picked by index inside the graph."""

    def __init__(self, data, labels, batch):
        self.x, self.y = theano.shared(data), theano.shared(labels)
        self.perm = theano.shared(np.random.default_rng(0).permutation(len(data)).astype("int64"))
        self.index = T.lscalar("index")
        picked = self.perm[self.index * batch : (self.index + 1) * batch]
        self.batch_x, self.batch_y = self.x[picked], self.y[picked]
        self.batches, self.counter = len(data) // batch, iter(range(10**9))

    def step(self, outputs, updates=None):
        """A step of a graph over the picked minibatch, each call the next minibatch."""
        f = theano.function([self.index], outputs, updates=updates)
        return lambda: float(np.asarray(f(next(self.counter) % self.batches)))  # read back, as reading() does

    def release(self):
        self.x.set_value(np.zeros((1,) + self.x.get_value(borrow=True).shape[1:], "float32"))


def held_dataset(b):
    n, batch, cols = sizes(b.quick)
    data = np.empty((n, cols), dtype="float32")
    for lo in range(0, n, 8192):  # in pieces: standard_normal of the whole would double the memory it needs
        data[lo : lo + 8192] = b.rng.standard_normal((min(8192, n - lo), cols), dtype="float32")
    labels = b.rng.integers(0, 10, n).astype("int32")
    nbytes = batch * cols * 4
    steps = max(8, b.steps_for(nbytes, total_mib=4096))
    # The gathers take a fraction of a millisecond a batch: more of them, and the held gather and the idiom's
    # in turn over rounds (medians), or one pause of the machine decides their ratio.
    gather_steps, rounds = max(8, b.steps_for(nbytes, total_mib=16384)), 3
    pcie = pcie_gbps(b, nbytes)

    q = tq.Queue([("x", "float32", (batch, cols)), ("y", "int32", (batch,))], capacity=3, name="held")
    x, y = q.dequeue()
    transfer = reading(theano.function([], x[0, 0]))
    idiom = SharedIdiom(data, labels, batch)
    idiom_transfer = idiom.step(idiom.batch_x[0, 0])
    seconds = {True: [], False: [], "in step": [], "idiom": []}
    gathers = {}
    for _ in range(rounds):
        for device in (True, False):
            spent, gathers[device] = fed_seconds(q, transfer, data, labels, gather_steps, device)
            seconds[device].append(spent)
        seconds["in step"].append(fed_seconds(q, transfer, data, labels, gather_steps, True, in_step=True)[0])
        seconds["idiom"].append(best_of(lambda: time_steps(idiom_transfer, gather_steps), 2))
    rates = {k: nbytes / statistics.median(v) / 1e9 for k, v in seconds.items()}
    spread = {k: max(v) / min(v) for k, v in seconds.items()}
    table = [
        {
            "what": "batches into a graph, %s gather" % gathers[device],
            "MiB": nbytes / MiB,
            "GB/s": rates[device],
            "x PCIe": rates[device] / pcie,
            "spread": spread[device],
        }
        for device in (True, False)
    ]
    idiom_gather = rates["idiom"]
    table.append(
        {
            "what": "batches into a graph, device gather by the dequeue on the step's stream",
            "MiB": nbytes / MiB,
            "GB/s": rates["in step"],
            "x PCIe": rates["in step"] / pcie,
            "x idiom": rates["in step"] / idiom_gather,
            "spread": spread["in step"],
        }
    )
    table.append(
        {
            "what": "shared-variable idiom: minibatch indexed in the graph",
            "GB/s": idiom_gather,
            "x PCIe": idiom_gather / pcie,
            "spread": spread["idiom"],
        }
    )
    table[0]["x host gather"] = rates[True] / rates[False]
    table[0]["x idiom"] = rates[True] / idiom_gather
    table.append({"what": "PCIe limit (pinned, %d MiB)" % (nbytes // MiB), "GB/s": pcie})

    loss, updates = mlp_train_step(x, y, cols, HIDDEN, 10, np.random.default_rng(1))
    fed = reading(theano.function([], loss, updates=updates))
    fed_s, _ = fed_seconds(q, fed, data, labels, steps, True)
    fed_in_step_s, _ = fed_seconds(q, fed, data, labels, steps, True, in_step=True)
    resident_x, resident_y = theano.shared(data[:batch]), theano.shared(labels[:batch])
    loss_r, updates_r = mlp_train_step(resident_x, resident_y, cols, HIDDEN, 10, np.random.default_rng(1))
    resident = reading(theano.function([], loss_r, updates=updates_r))
    resident_s = best_of(lambda: time_steps(resident, steps), 2)
    loss_i, updates_i = mlp_train_step(idiom.batch_x, idiom.batch_y, cols, HIDDEN, 10, np.random.default_rng(1))
    idiom_s = best_of(lambda: time_steps(idiom.step(loss_i, updates_i), steps), 2)
    idiom.release()
    table += [
        {
            "what": "MLP step, fed by device=True",
            "step ms": 1e3 * fed_s,
            "x resident": fed_s / resident_s,
            "x idiom": fed_s / idiom_s,
        },
        {
            "what": "MLP step, fed by device=True, gathered by the dequeue on the step's stream",
            "step ms": 1e3 * fed_in_step_s,
            "x resident": fed_in_step_s / resident_s,
            "x idiom": fed_in_step_s / idiom_s,
        },
        {"what": "MLP step, batch resident in a shared variable", "step ms": 1e3 * resident_s},
        {
            "what": "MLP step, shared-variable idiom (dataset in theano.shared, indexed)",
            "step ms": 1e3 * idiom_s,
            "x resident": idiom_s / resident_s,
        },
    ]
    gather_x_pcie, step_x_resident = rates[True] / pcie, fed_s / resident_s
    return {
        "rows": table,
        "dataset MiB": data.nbytes / MiB,
        "batch": [batch, cols],
        "target": ">= 5 x PCIe (shuffled gather into the graph); MLP step <= 1.05 x resident",
        "met": gather_x_pcie >= 5 and step_x_resident <= 1.05,
        "headline": "device=True: %.1f GB/s = %.2f x PCIe (%.2f x the host gather, %.2f x the shared-variable "
        "idiom's gather); %d MiB-batch MLP step %.3f x resident, %.3f x the shared-variable idiom"
        % (
            rates[True],
            gather_x_pcie,
            rates[True] / rates[False],
            rates[True] / idiom_gather,
            nbytes // MiB,
            step_x_resident,
            fed_s / idiom_s,
        ),
    }
