"""What the worker tests share: taking a queue's elements, the batches a sampler gives, processes' liveness."""

import time

import numpy as np
from worker_datasets import ROWS, expected_batch

import theano_queue as tq
from theano_queue.sampler import Sampler


def drain(take, limit=10_000):
    got = []
    while len(got) < limit:
        try:
            got.append(take())
        except tq.QueueClosed:
            break
    return got


def getter(q):
    return lambda: q.get(timeout=20)


def expected(n, epochs=1, **settings):
    sampler = Sampler(n, ROWS, epochs=epochs, **settings)
    return [expected_batch(sampler.batch(p)) for p in range(sampler.total)]


def assert_same(got, want):
    assert len(got) == len(want)
    for i, (have, need) in enumerate(zip(got, want)):
        for a, b in zip(have, need):
            assert a.dtype == b.dtype and a.shape == b.shape, "element %d" % i
            assert np.array_equal(a, b), "element %d differs" % i


def alive(pid):
    """True while pid runs (a zombie has ended)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def wait_ready(feeder, seconds=30):
    deadline = time.monotonic() + seconds
    while feeder.stats().get("startup_s") is None:
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.02)
