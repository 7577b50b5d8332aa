"""Issue 43.3's floor: how fast a copied 256 MiB batch can cross the bus on this host.

    python -m bench.bus_floor [--mib 256] [--threads 4,8,16] [--json PATH]

A batch that is not registered (an array dataset's shuffled rows, a numpy
batch from a generator) is written by the host into a pinned slot, and the
DMA engine then reads that slot.  Pipelined, the queue delivers at the slower
of the two *while the other runs*: both read or write the host's memory.
This prints, per copy-thread count:

  dma alone        pinned host-to-device copies, nothing else running
  copy alone       the engine's copy pool into a host slot
  dma | copy       each one's rate measured while the other runs (the floor:
                   no pipeline of the two does better than the slower of them)
  array dataset    the array Feeder's shuffled host gather through a GPU queue,
                   read by a graph that does almost nothing
  numpy batches    a generator's numpy batches through a GPU queue

and each rate as "x ideal" (the DMA alone over the rate; 1.0 is the bus).
Needs Theano on a CUDA GPU for all but "copy alone".
"""

import argparse
import json
import threading
import time

import numpy as np
import theano

import theano_queue as tq
from bench.common import MiB, cycle, reading, time_steps
from theano_queue import _engine
from theano_queue.tools.probe import h2d_seconds, host_copy_gbps

ROW = 784  # an MNIST row of float32: the small rows the host gathers (the GPU's batch copy takes large ones)


def dma_gbps(nbytes, seconds=1.0):
    """Pinned host-to-device GB/s over about `seconds` of back-to-back copies."""
    one = h2d_seconds(nbytes, 2)
    return nbytes / h2d_seconds(nbytes, max(2, int(seconds / one))) / 1e9


def copy_gbps(nbytes, threads, seconds=1.0):
    """The copy pool's GB/s into a host slot, the best of as many copies as fit in about `seconds`."""
    one = nbytes / host_copy_gbps(nbytes, threads, repeats=1) / 1e9
    return host_copy_gbps(nbytes, threads, repeats=max(2, int(seconds / one)))


def both_at_once(nbytes, threads, seconds=2.0):
    """(dma GB/s, copy GB/s), each measured while the other runs: the DMA in a thread (ctypes lets the GIL go
    in each driver call), the copy in this one, started once the DMA runs and ended before it does."""
    result = {}
    dma = threading.Thread(target=lambda: result.setdefault("dma", dma_gbps(nbytes, seconds)))
    dma.start()
    time.sleep(0.1 * seconds)
    copy = copy_gbps(nbytes, threads, 0.6 * seconds)
    dma.join()
    return result["dma"], copy


def array_dataset(nbytes):
    """Three batches' worth of MNIST-sized float32 rows."""
    return np.random.default_rng(0).standard_normal((3 * (nbytes // (4 * ROW)), ROW), dtype="float32")


def numpy_batches(nbytes):
    """Three ready numpy batches of `nbytes`, rows of 4096 float32."""
    return [np.random.default_rng(i).standard_normal((nbytes // (4 * 4096), 4096), dtype="float32") for i in range(3)]


def fed_gbps(q, feeder_args, feeder_kwargs, steps=12):
    """GB/s of q's element read by a graph that reads one value back a step, while a Feeder fills q."""
    first = reading(theano.function([], q.dequeue()[0, 0]))
    with tq.Feeder(q, *feeder_args, close_when_done=False, **feeder_kwargs):
        seconds = time_steps(first, steps)
    q.close(cancel_pending=True)
    return q.components[0].nbytes / seconds / 1e9


def array_dataset_gbps(data, capacity=3, steps=12):
    """The array Feeder's shuffled host gather of a third of `data` a batch, through a GPU queue."""
    q = tq.Queue([("x", "float32", (len(data) // 3, ROW))], capacity=capacity, name="bus_floor_arrays")
    return fed_gbps(q, [(data,)], {"shuffle": True, "epochs": None, "drop_last": True}, steps)


def numpy_batches_gbps(pool, capacity=3, steps=12):
    """A generator's ready numpy batches (`pool`, over and over) through a GPU queue, each copied into a pinned
    slot."""
    q = tq.Queue([("x", "float32", pool[0].shape)], capacity=capacity, name="bus_floor_numpy")
    return fed_gbps(q, [cycle(pool)], {}, steps)


def by_capacity(mib, threads, capacities):
    """The array dataset and the numpy batches through rings of each capacity, the copy pool at `threads`."""
    nbytes = mib * MiB
    data, pool = array_dataset(nbytes), numpy_batches(nbytes)
    before = _engine.copy_threads()
    _engine.set_copy_threads(threads)
    try:
        return [
            {"capacity": c, "array dataset": array_dataset_gbps(data, c), "numpy batches": numpy_batches_gbps(pool, c)}
            for c in capacities
        ]
    finally:
        _engine.set_copy_threads(before)


def measure(mib, thread_counts):
    nbytes = mib * MiB
    on_gpu = theano.config.device.startswith("cuda")
    rows = []
    dma = dma_gbps(nbytes) if on_gpu else None
    data, pool = (array_dataset(nbytes), numpy_batches(nbytes)) if on_gpu else (None, None)
    for threads in thread_counts:
        row = {"threads": threads, "copy alone": copy_gbps(nbytes, threads)}
        if on_gpu:
            row["dma | copy"], row["copy | dma"] = both_at_once(nbytes, threads)
            before = _engine.copy_threads()
            _engine.set_copy_threads(threads)
            try:
                row["array dataset"] = array_dataset_gbps(data)
                row["numpy batches"] = numpy_batches_gbps(pool)
            finally:
                _engine.set_copy_threads(before)
        rows.append(row)
    return {"MiB": mib, "dma alone": dma, "rows": rows}


def show(result):
    dma = result["dma alone"]
    print("%d MiB batches; dma alone %s GB/s" % (result["MiB"], "%.1f" % dma if dma else "(no GPU)"))
    columns = ["copy alone", "dma | copy", "copy | dma", "array dataset", "numpy batches"]
    print("threads  " + "".join("%22s" % c for c in columns))
    for row in result["rows"]:
        cells = []
        for c in columns:
            gbps = row.get(c)
            cells.append(
                "%22s" % ("-" if gbps is None else "%.1f GB/s (%.2fx)" % (gbps, dma / gbps) if dma else "%.1f" % gbps)
            )
        print("%7d  %s" % (row["threads"], "".join(cells)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--threads", default="4,8,16", help="copy-thread counts, comma-separated")
    parser.add_argument("--capacities", help="instead: the two queue paths at these ring capacities (comma-separated)")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    if args.capacities:
        threads = int(args.threads.split(",")[-1])
        dma = dma_gbps(args.mib * MiB)
        rows = by_capacity(args.mib, threads, [int(c) for c in args.capacities.split(",")])
        print("%d MiB batches, %d copy threads; dma alone %.1f GB/s" % (args.mib, threads, dma))
        for row in rows:
            print(
                "capacity %2d: array dataset %.1f GB/s (%.2fx), numpy batches %.1f GB/s (%.2fx)"
                % (
                    row["capacity"],
                    row["array dataset"],
                    dma / row["array dataset"],
                    row["numpy batches"],
                    dma / row["numpy batches"],
                )
            )
        return
    result = measure(args.mib, [int(t) for t in args.threads.split(",")])
    show(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
