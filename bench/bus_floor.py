"""Issue 43.3's floor: how fast a copied 256 MiB batch can cross the bus on this host.

    python -m bench.bus_floor [--mib 256] [--threads 4,8,16] [--json PATH]
    python -m bench.bus_floor --memory pinned,shared,registered,huge

A batch that is not registered (an array dataset's shuffled rows, a numpy
batch from a generator) is written by the host into a pinned slot, and the
DMA engine then reads that slot.  Pipelined, the queue delivers at the slower
of the two *while the other runs*: both read or write the host's memory.
This prints, per copy-thread count:

  dma alone        pinned host-to-device copies, nothing else running
  copy alone       the engine's copy pool into a host slot (the best copy)
  dma | copy       each one's rate while the other runs, the copy's that of
                   its median copy (the floor: no pipeline of the two does
                   better than the slower of them)
  array dataset    the array Feeder's shuffled host gather through a GPU queue,
                   read by a graph that does almost nothing
  numpy batches    a generator's numpy batches through a GPU queue

and each rate as "x ideal" (the DMA alone over the rate; 1.0 is the bus).
For the two queue paths it then prints where a batch's time goes, from a
trace of the elements put while they run (Queue.trace): the medians of the period between
two batches, the producer's write of a slot (copy or gather), the slot's
upload and the producer's wait for room.  A period near the write means the
host's copy is the slower stage, near the upload the DMA.

``--memory`` prints instead the DMA alone from each kind of host memory
(``theano_queue.tools.probe.h2d_seconds``'s ``memory``): the driver's pinned
memory, shared memory registered as a queue's staging is, and anonymous
memory registered with and without a request for huge pages, beside the
share of each that the kernel backs with huge pages and one thread's write
into it.  A queue's staging slower than pinned memory is what the DMA loses
to its pages.
Needs Theano on a CUDA GPU for all but "copy alone".
"""

import argparse
import json
import statistics
import threading
import time

import numpy as np
import theano

import theano_queue as tq
from bench.common import MiB, cycle, reading, time_steps
from theano_queue import _engine
from theano_queue.tools.probe import H2D_MEMORY, h2d_seconds, host_copy_gbps, host_write_gbps, huge_page_share
from theano_queue.tools.trace import STAGES

#: A traced stage's (first event, last event), by the name the trace's timeline gives it.
STAGE_EVENTS = {name: (first, last) for name, first, last in STAGES}

ROW = 784  # an MNIST row of float32: the small rows the host gathers (the GPU's batch copy takes large ones)


def dma_gbps(nbytes, seconds=1.0, memory="pinned"):
    """Host-to-device GB/s over about `seconds` of back-to-back copies from host memory of kind `memory`."""
    one = h2d_seconds(nbytes, 2, memory=memory)
    return nbytes / h2d_seconds(nbytes, max(2, int(seconds / one)), memory=memory) / 1e9


MAPPED = ("registered", "shared", "huge")  # the kinds that are mappings of our own (not the driver's, not numpy's)


def by_memory(mib, kinds, rounds=3):
    """The DMA alone from each kind of host memory, the kinds taking turns over `rounds`: per kind, the median
    GB/s, its ratio to pinned memory's (when measured), the share of huge pages a mapping of it gets and one
    thread's write into such a mapping (median GB/s)."""
    nbytes = mib * MiB
    rates = {kind: [] for kind in kinds}
    writes = {kind: [] for kind in kinds if kind in MAPPED}
    for _ in range(rounds):
        for kind in kinds:
            rates[kind].append(dma_gbps(nbytes, memory=kind))
            if kind in MAPPED:
                writes[kind].append(host_write_gbps(nbytes, kind, repeats=3))
    rows = []
    for kind in kinds:
        gbps = statistics.median(rates[kind])
        pinned = statistics.median(rates["pinned"]) if "pinned" in rates else None
        rows.append(
            {
                "memory": kind,
                "gbps": gbps,
                "x pinned": gbps / pinned if pinned else None,
                "huge pages": huge_page_share(nbytes, kind) if kind in MAPPED else None,
                "write gbps": statistics.median(writes[kind]) if kind in MAPPED else None,
            }
        )
    return rows


def memory_lines(rows):
    """The lines --memory prints."""
    lines = ["%-12s %10s %9s %11s %12s" % ("memory", "GB/s", "x pinned", "huge pages", "write GB/s")]
    for row in rows:
        lines.append(
            "%-12s %10.1f %9s %11s %12s"
            % (
                row["memory"],
                row["gbps"],
                "-" if row["x pinned"] is None else "%.3f" % row["x pinned"],
                "-" if row["huge pages"] is None else "%.0f%%" % (100 * row["huge pages"]),
                "-" if row.get("write gbps") is None else "%.1f" % row["write gbps"],
            )
        )
    return lines


def copy_gbps(nbytes, threads, seconds=1.0, statistic="best"):
    """The copy pool's GB/s into a host slot, over as many copies as fit in about `seconds`: the best one's, or
    the median one's (the rate it keeps while the DMA shares the memory)."""
    one = nbytes / host_copy_gbps(nbytes, threads, repeats=1) / 1e9
    return host_copy_gbps(nbytes, threads, repeats=max(3, int(seconds / one)), statistic=statistic)


def both_at_once(nbytes, threads, seconds=2.0):
    """(dma GB/s, copy GB/s), each measured while the other runs: the DMA in a thread (ctypes lets the GIL go
    in each driver call), the copy in this one, started once the DMA runs and ended before it does; the copy's
    is the median copy's."""
    result = {}
    dma = threading.Thread(target=lambda: result.setdefault("dma", dma_gbps(nbytes, seconds)))
    dma.start()
    time.sleep(0.1 * seconds)
    copy = copy_gbps(nbytes, threads, 0.6 * seconds, statistic="median")
    dma.join()
    return result["dma"], copy


def array_dataset(nbytes):
    """Three batches' worth of MNIST-sized float32 rows."""
    return np.random.default_rng(0).standard_normal((3 * (nbytes // (4 * ROW)), ROW), dtype="float32")


def numpy_batches(nbytes):
    """Three ready numpy batches of `nbytes`, rows of 4096 float32."""
    return [np.random.default_rng(i).standard_normal((nbytes // (4 * 4096), 4096), dtype="float32") for i in range(3)]


def stage_medians(elements):
    """Medians in ms over traced elements (Queue.trace): the period between two elements made ready, the
    producer's write of a slot (the host copy or gather), its upload (issued to filled), its wait for room."""

    def median_ms(stage):
        first, last = STAGE_EVENTS[stage]
        spans = [(e["ns"][last] - e["ns"][first]) / 1e6 for e in elements if first in e["ns"] and last in e["ns"]]
        return statistics.median(spans) if spans else None

    ready = [e["ns"]["ready"] for e in elements if "ready" in e["ns"]]
    periods = [(b - a) / 1e6 for a, b in zip(ready, ready[1:])]
    return {
        "period": statistics.median(periods) if periods else None,
        "write": median_ms("write"),
        "upload": median_ms("copy to device"),
        "wait for room": median_ms("wait for room"),
    }


def fed(q, feeder_args, feeder_kwargs, steps=12):
    """(GB/s, stage medians) of q's element read by a graph that reads one value back a step, while a Feeder
    fills q; the stages from a trace of the first `steps` elements put once the graph is compiled."""
    first = reading(theano.function([], q.dequeue()[0, 0]))
    with tq.Feeder(q, *feeder_args, close_when_done=False, **feeder_kwargs):
        with q.trace(steps=steps) as trace:
            seconds = time_steps(first, steps, warmup=3)
    q.close(cancel_pending=True)
    return q.components[0].nbytes / seconds / 1e9, stage_medians(trace.elements)


def array_dataset_fed(data, capacity=3, steps=12):
    """The array Feeder's shuffled host gather of a third of `data` a batch, through a GPU queue: fed()."""
    q = tq.Queue([("x", "float32", (len(data) // 3, ROW))], capacity=capacity, name="bus_floor_arrays")
    return fed(q, [(data,)], {"shuffle": True, "epochs": None, "drop_last": True}, steps)


def numpy_batches_fed(pool, capacity=3, steps=12):
    """A generator's ready numpy batches (`pool`, over and over) through a GPU queue, each copied into a pinned
    slot: fed()."""
    q = tq.Queue([("x", "float32", pool[0].shape)], capacity=capacity, name="bus_floor_numpy")
    return fed(q, [cycle(pool)], {}, steps)


QUEUE_PATHS = (("array dataset", array_dataset_fed), ("numpy batches", numpy_batches_fed))


def queue_paths(data, pool, capacity=3):
    """{path: GB/s} and {path: stage medians} of the two queue paths at `capacity`."""
    rates, stages = {}, {}
    for (name, run), source in zip(QUEUE_PATHS, (data, pool)):
        rates[name], stages[name] = run(source, capacity)
    return rates, stages


def by_capacity(mib, threads, capacities):
    """The array dataset and the numpy batches through rings of each capacity, the copy pool at `threads`."""
    nbytes = mib * MiB
    data, pool = array_dataset(nbytes), numpy_batches(nbytes)
    before = _engine.copy_threads()
    _engine.set_copy_threads(threads)
    try:
        rows = []
        for c in capacities:
            rates, stages = queue_paths(data, pool, c)
            rows.append({"capacity": c, **rates, "stages": stages})
        return rows
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
                rates, row["stages"] = queue_paths(data, pool)
                row.update(rates)
            finally:
                _engine.set_copy_threads(before)
        rows.append(row)
    return {"MiB": mib, "dma alone": dma, "rows": rows}


def stage_lines(label, stages):
    """One line per queue path: its stage medians in ms."""
    return [
        "  %s, %s: %s"
        % (label, path, ", ".join("%s %s" % (k, "-" if v is None else "%.2f ms" % v) for k, v in medians.items()))
        for path, medians in stages.items()
    ]


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
    print("medians per batch, through the queue (period: between two batches made ready):")
    for row in result["rows"]:
        for line in stage_lines("%d threads" % row["threads"], row.get("stages", {})):
            print(line)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--threads", default="4,8,16", help="copy-thread counts, comma-separated")
    parser.add_argument("--capacities", help="instead: the two queue paths at these ring capacities (comma-separated)")
    parser.add_argument(
        "--memory", help="instead: the DMA alone from these kinds of host memory (%s)" % ", ".join(H2D_MEMORY)
    )
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    if args.memory:
        kinds = args.memory.split(",")
        unknown = [k for k in kinds if k not in H2D_MEMORY]
        if unknown:
            parser.error("no memory kind %s; the kinds are %s" % (", ".join(unknown), ", ".join(H2D_MEMORY)))
        rows = by_memory(args.mib, kinds)
        print("%d MiB copies, host to device, medians of 3 rounds" % args.mib)
        print("\n".join(memory_lines(rows)))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
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
            print("\n".join(stage_lines("capacity %d" % row["capacity"], row["stages"])))
        return
    result = measure(args.mib, [int(t) for t in args.threads.split(",")])
    show(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
