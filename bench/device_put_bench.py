"""Scenario 17 of bench/run.py: a producer of device arrays (issue 11).

A thread puts pygpu arrays (Theano's context, so the put is ordered after
libgpuarray's stream and waits for nothing on the host) while a compiled
function dequeues them; elements/s and GB/s through the ring, next to a
plain device-to-device copy of the same bytes measured in the same run.  An
element crosses the ring with two such copies (into the slot on the copy
stream, out of it on Theano's), so half the copy's rate is the ceiling.  A
second row puts the same memory through a __cuda_array_interface__ without a
stream (pycuda's arrays): each put then waits on the host for its copy.
"host us/put" is the host time of a put into an emptied ring right after the
steps that emptied it, "host us/put, awake" the same after a 2 ms spin: on
the H200 the first grew with the element (15.8 us at 1 MiB, 25.2 us at 256
MiB) though nothing the put does on the host does; the steps' longer waits
for the GPU, asleep, leave a colder core is the suspect this column tests.
"""

import statistics
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


def spin(seconds):
    """Keeps this thread's core busy for a while (no sleep): it is awake and at speed when the spin ends."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def host_times(q, f, source, rounds, awake_s=0.0):
    """Median host time (us) of one put into an emptied ring (no put waits for a slot) and of one step f()
    taking from a full one, over rounds that fill the ring and empty it.  With awake_s, the puts start after
    that long a spin instead of right after the steps, whose waits for the GPU put the thread to sleep
    (longer for larger elements): what a put costs on a core that is awake."""
    per_put, per_step = [], []
    for _ in range(rounds):
        spin(awake_s)
        started = time.perf_counter()
        for _ in range(q.capacity):
            q.put(source)
        filled = time.perf_counter()
        for _ in range(q.capacity):
            f()
        per_put.append((filled - started) / q.capacity * 1e6)
        per_step.append((time.perf_counter() - filled) / q.capacity * 1e6)
    return statistics.median(per_put), statistics.median(per_step)


def device_producer(b):
    import pygpu

    rows = []
    ratios, host = [], []
    for mib in [1, 16] if b.quick else [1, 16, 64, 256]:
        n = mib * MiB // 4
        src = pygpu.gpuarray.array(b.rng.standard_normal(n).astype("float32"), context=b.context)
        dst = pygpu.empty((n,), dtype="float32", context=b.context)
        count = max(20, min(2000, int((256 if b.quick else 8192) * MiB / (4 * n))))
        limit = copy_gbps(b, src, dst, max(10, count // 4))
        q = tq.Queue([("x", "float32", (n,))], capacity=3, name="device%d" % mib)
        x = q.dequeue()
        f = theano.function([], x[:2])  # reads 8 bytes back: the step is over when the element is
        copy_us = n * 4 / (limit * 1e9) * 1e6  # one element's device-to-device copy
        for label, source in (("pygpu (stream)", src), ("CUDA array interface, no stream", NoStream(src))):
            seconds = through_queue(q, f, source, count)
            gbps = count * n * 4 / seconds / 1e9
            host_us, step_us = host_times(q, f, source, rounds=5 if b.quick else 20)
            awake_us, _ = host_times(q, f, source, rounds=5 if b.quick else 20, awake_s=0.002)
            rows.append(
                {
                    "MiB": mib,
                    "source": label,
                    "elements/s": count / seconds,
                    "GB/s": gbps,
                    "D2D copy GB/s": limit,
                    "of half the copy": gbps / (limit / 2),
                    "host us/put": host_us,
                    "host us/put, awake": awake_us,
                    "D2D copy us": copy_us,
                    "host / copy": host_us / copy_us,
                    "step us": step_us,
                }
            )
            if label.startswith("pygpu"):
                ratios.append(gbps / (limit / 2))
                host.append(host_us)
    return {
        "rows": rows,
        "headline": "device puts reach %.0f%%-%.0f%% of half the device-to-device copy rate (two copies per "
        "element), %.1f-%.1f us of host time each (pygpu, on a stream)"
        % (100 * min(ratios), 100 * max(ratios), min(host), max(host)),
        "target": ">= 0.8x half the copy rate from 1 MiB up, <= 15 us of host time per put (issue 21)",
        "met": all(
            r["of half the copy"] >= 0.8 and r["host us/put"] <= 15 for r in rows if r["source"].startswith("pygpu")
        ),
    }
