"""Why ordinary numpy batches reach less of the bus than zero-copy ones: the
host copy into pinned staging, alone and while the bus is busy.

    python -m bench.copy_profile

For several copy-thread counts it prints (1) the rate of Queue.put into a GPU
queue's pinned staging with nothing else running, and (2) the rate through the
queue when a training loop consumes (the copy then shares host memory with the
host-to-device DMA reading the previous slot).
"""

import time

import numpy as np
import theano

import theano_queue as tq
from theano_queue import _engine

MiB = 1 << 20


def put_only_gbps(mib, rng):
    rows = mib * MiB // (4 * 4096)
    batch = rng.standard_normal((rows, 4096)).astype("float32")
    q = tq.Queue([("x", "float32", (rows, 4096))], capacity=2, name="put_only")
    times = []
    for _ in range(6):
        started = time.perf_counter()
        q.put(batch)
        times.append(time.perf_counter() - started)
        q.get()  # frees the slot; not timed
    return mib * MiB / min(times) / 1e9


def through_queue_gbps(mib, rng, steps=None):
    rows = mib * MiB // (4 * 4096)
    pool = [rng.standard_normal((rows, 4096)).astype("float32") for _ in range(4)]
    q = tq.Queue([("x", "float32", (rows, 4096))], capacity=3, name="through")
    first = theano.function([], q.dequeue()[0, 0])
    steps = steps or max(10, 2048 // mib)

    def source():
        i = 0
        while True:
            yield pool[i % len(pool)]
            i += 1

    with tq.Feeder(q, source(), close_when_done=False):
        for _ in range(3):
            float(first())
        started = time.perf_counter()
        for _ in range(steps):
            float(first())
        elapsed = time.perf_counter() - started
    q.close(cancel_pending=True)
    return mib * MiB * steps / elapsed / 1e9


def main():
    rng = np.random.default_rng(0)
    default = _engine.copy_threads()
    print("copy threads | put-only 64 MiB GB/s | through the queue 16 MiB GB/s | 256 MiB GB/s")
    for threads in (1, 4, 8, 12, 16):
        _engine.set_copy_threads(threads)
        print(
            "%12d | %20.1f | %29.1f | %12.1f"
            % (threads, put_only_gbps(64, rng), through_queue_gbps(16, rng), through_queue_gbps(256, rng)),
            flush=True,
        )
    _engine.set_copy_threads(default)


if __name__ == "__main__":
    main()
