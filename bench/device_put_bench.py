"""Scenario 17 of bench/run.py: a producer of device arrays (issue 11).

A thread puts pygpu arrays (Theano's context, so the put is ordered after
libgpuarray's stream and waits for nothing on the host) while a compiled
function dequeues them; elements/s and GB/s through the ring, next to a
plain device-to-device copy of the same bytes measured in the same run.  An
element crosses the ring with two such copies (into the slot on the copy
stream, out of it on Theano's), so half the copy's rate is the ceiling.  A
second row puts the same memory through a __cuda_array_interface__ without a
stream (pycuda's arrays): each put then waits on the host for its copy.
"""

import threading
import time

import numpy as np
import theano

import theano_queue as tq
from bench.common import MiB, best_of


class NoStream:
    """A __cuda_array_interface__ over a pygpu array, with no stream (as pycuda exports)."""

    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": tuple(array.shape),
            "typestr": np.dtype(array.dtype).str,
            "data": (array.gpudata, False),  # pygpu: the device address, offset included
            "strides": None,
            "version": 3,
            "stream": None,
        }


def copy_gbps(b, src, dst, copies):
    """A plain device-to-device copy of src into dst (libgpuarray's, on Theano's stream)."""

    def measure():
        dst[:] = src
        dst.sync()
        started = time.perf_counter()
        for _ in range(copies):
            dst[:] = src
        dst.sync()
        return (time.perf_counter() - started) / copies

    return src.size * src.itemsize / best_of(measure) / 1e9


def through_queue(q, f, source, count):
    """Seconds for count elements put by a thread and taken by f."""
    errors = []

    def produce():
        try:
            for _ in range(count):
                q.put(source)
        except Exception as exc:  # reported below, not lost in the thread
            errors.append(exc)

    for _ in range(2):  # warm: the first calls compile and allocate
        q.put(source)
        f()
    producer = threading.Thread(target=produce)
    started = time.perf_counter()
    producer.start()
    for _ in range(count):
        f()
    elapsed = time.perf_counter() - started
    producer.join()
    if errors:
        raise errors[0]
    return elapsed


def device_producer(b):
    import pygpu

    rows = []
    ratios = []
    for mib in [1, 16] if b.quick else [1, 16, 64, 256]:
        n = mib * MiB // 4
        src = pygpu.gpuarray.array(b.rng.standard_normal(n).astype("float32"), context=b.context)
        dst = pygpu.empty((n,), dtype="float32", context=b.context)
        count = max(20, min(2000, int((256 if b.quick else 8192) * MiB / (4 * n))))
        limit = copy_gbps(b, src, dst, max(10, count // 4))
        q = tq.Queue([("x", "float32", (n,))], capacity=3, name="device%d" % mib)
        x = q.dequeue()
        f = theano.function([], x[:2])  # reads 8 bytes back: the step is over when the element is
        for label, source in (("pygpu (stream)", src), ("CUDA array interface, no stream", NoStream(src))):
            seconds = through_queue(q, f, source, count)
            gbps = count * n * 4 / seconds / 1e9
            rows.append(
                {
                    "MiB": mib,
                    "source": label,
                    "elements/s": count / seconds,
                    "GB/s": gbps,
                    "D2D copy GB/s": limit,
                    "of half the copy": gbps / (limit / 2),
                }
            )
            if label.startswith("pygpu"):
                ratios.append(gbps / (limit / 2))
    return {
        "rows": rows,
        "headline": "device puts reach %.0f%%-%.0f%% of half the device-to-device copy rate (two copies per "
        "element)" % (100 * min(ratios), 100 * max(ratios)),
        "target": ">= 50% of half the copy rate at 16 MiB and above",
        "met": all(r["of half the copy"] >= 0.5 for r in rows if r["MiB"] >= 16 and r["source"].startswith("pygpu")),
    }
