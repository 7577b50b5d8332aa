"""Scenario 22 of bench/run.py: an array dataset held in GPU memory, ``Feeder(..., device=True)`` (issue 21.3).

Shuffled 256 MiB batches of 16 KiB rows from a 2 GiB dataset (64 MiB batches of a 256 MiB one with --quick),
side by side in one run:

* the rate at which batches reach a graph that reads one value of each: the dataset gathered on the GPU
  (``device=True``) against the PCIe limit (scenario 1's figure where it ran first, else measured here) and
  against the same dataset gathered on the host (the default array dataset);
* the gather kernel alone (pygpu's ``take1``, the row numbers uploaded each time), what the queue adds to it;
* a 3-layer MLP step on those batches: fed from the GPU-resident dataset, against the same step on a batch
  already resident in a shared variable, and against the shared-variable idiom (the whole dataset in a
  ``theano.shared``, a permutation indexed by minibatch number inside the graph).
"""

import time

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq
from bench.common import MiB, best_of, mlp_train_step, reading, time_steps
from theano_queue.feed.resident import DeviceArrays
from theano_queue.probe import h2d_seconds


def sizes(quick):
    """(dataset rows, batch rows, row elements): 16 KiB float32 rows; 256 MiB batches (64 MiB with --quick)."""
    return (16384, 4096, 4096) if quick else (131072, 16384, 4096)


def pcie_gbps(b, nbytes):
    """Scenario 1's pinned host-to-device rate at this size where it ran in this run, else measured now."""
    mib = nbytes // MiB
    known = getattr(b, "limit", {})
    if mib in known:
        return known[mib]
    return nbytes / best_of(lambda: h2d_seconds(nbytes, b.steps_for(nbytes, 4096))) / 1e9


def fed_seconds(q, step, data, labels, steps, device):
    """Seconds per call of step() while an endless shuffled Feeder over (data, labels) fills q."""
    with tq.Feeder(q, (data, labels), shuffle=True, epochs=None, drop_last=True, close_when_done=False,
                   device=device) as feeder:
        seconds = best_of(lambda: time_steps(step, steps), 2)
        gather = feeder.stats()["gather"]
    q.close(cancel_pending=True)
    q.reopen()
    return seconds, gather


def kernel_gbps(data, labels, q, batch, repeats):
    """The gather alone: DeviceArrays.gather of a random batch's rows, the result read back once at the end."""
    device = DeviceArrays((data, labels), q.components, q._target.context_name, q.name)
    order = np.random.default_rng(0).permutation(len(data)).astype("int64")
    nbytes = batch * (data.itemsize * data.shape[1] + labels.itemsize)

    def measure():
        with device.current():
            device.gather(order[:batch])
            started = time.perf_counter()
            for r in range(repeats):
                first = (r * batch) % (len(data) - batch)
                gathered = device.gather(order[first : first + batch])
            np.asarray(gathered[1][:1])  # waits for the last gather
            return (time.perf_counter() - started) / repeats

    seconds = best_of(measure, 2)
    device.release()
    return nbytes / seconds / 1e9


def idiom_seconds(data, labels, batch, cols, steps):
    """The shared-variable idiom: the dataset in theano.shared, a shuffled minibatch picked by index in the graph."""
    n = len(data)
    whole_x, whole_y = theano.shared(data), theano.shared(labels)
    perm = theano.shared(np.random.default_rng(0).permutation(n).astype("int64"))
    index = T.lscalar("index")
    picked = perm[index * batch : (index + 1) * batch]
    loss, updates = mlp_train_step(whole_x[picked], whole_y[picked], cols, 1024, 10, np.random.default_rng(1))
    idiom = theano.function([index], loss, updates=updates)
    batches, counter = n // batch, iter(range(10**9))
    seconds = best_of(lambda: time_steps(lambda: float(idiom(next(counter) % batches)), steps), 2)
    whole_x.set_value(np.zeros((1, cols), "float32"))  # its device memory back before the next measurement
    return seconds


def device_resident(b):
    n, batch, cols = sizes(b.quick)
    data = np.empty((n, cols), dtype="float32")
    for lo in range(0, n, 8192):  # in pieces: standard_normal of the whole would double the memory it needs
        data[lo : lo + 8192] = b.rng.standard_normal((min(8192, n - lo), cols), dtype="float32")
    labels = b.rng.integers(0, 10, n).astype("int32")
    nbytes = batch * cols * 4
    steps = max(8, b.steps_for(nbytes, total_mib=4096))
    pcie = pcie_gbps(b, nbytes)

    q = tq.Queue([("x", "float32", (batch, cols)), ("y", "int32", (batch,))], capacity=3, name="resident")
    x, y = q.dequeue()
    transfer = reading(theano.function([], x[0, 0]))
    table = []
    rates = {}
    for device in (True, False):
        seconds, gather = fed_seconds(q, transfer, data, labels, steps, device)
        rates[device] = nbytes / seconds / 1e9
        table.append({"what": "batches into a graph, %s gather" % gather, "MiB": nbytes / MiB,
                      "GB/s": rates[device], "x PCIe": rates[device] / pcie})
    table[0]["x host gather"] = rates[True] / rates[False]
    kernel = kernel_gbps(data, labels, q, batch, steps)
    table.append({"what": "the gather kernel alone (take1, row numbers uploaded)", "GB/s": kernel,
                  "x PCIe": kernel / pcie})
    table.append({"what": "PCIe limit (pinned, %d MiB)" % (nbytes // MiB), "GB/s": pcie})

    loss, updates = mlp_train_step(x, y, cols, 1024, 10, np.random.default_rng(1))
    fed = reading(theano.function([], loss, updates=updates))
    fed_s, _ = fed_seconds(q, fed, data, labels, steps, True)
    resident_x, resident_y = theano.shared(data[:batch]), theano.shared(labels[:batch])
    loss_r, updates_r = mlp_train_step(resident_x, resident_y, cols, 1024, 10, np.random.default_rng(1))
    resident = reading(theano.function([], loss_r, updates=updates_r))
    resident_s = best_of(lambda: time_steps(resident, steps), 2)
    idiom_s = idiom_seconds(data, labels, batch, cols, steps)
    table += [
        {"what": "MLP step, fed by device=True", "step ms": 1e3 * fed_s, "x resident": fed_s / resident_s,
         "x idiom": fed_s / idiom_s},
        {"what": "MLP step, batch resident in a shared variable", "step ms": 1e3 * resident_s},
        {"what": "MLP step, shared-variable idiom (dataset in theano.shared, indexed)", "step ms": 1e3 * idiom_s,
         "x resident": idiom_s / resident_s},
    ]
    gather_x_pcie, step_x_resident = rates[True] / pcie, fed_s / resident_s
    return {
        "rows": table,
        "dataset MiB": data.nbytes / MiB,
        "batch": [batch, cols],
        "target": ">= 5 x PCIe (shuffled gather into the graph); MLP step <= 1.05 x resident",
        "met": gather_x_pcie >= 5 and step_x_resident <= 1.05,
        "headline": "device=True: %.1f GB/s = %.2f x PCIe (%.2f x the host gather; the kernel alone %.2f x PCIe); "
        "%d MiB-batch MLP step %.3f x resident, %.3f x the shared-variable idiom"
        % (rates[True], gather_x_pcie, rates[True] / rates[False], kernel / pcie, nbytes // MiB, step_x_resident,
           fed_s / idiom_s),
    }
