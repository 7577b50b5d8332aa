"""Queue(capacity="auto") on the GPU (issue 44.2): the slots fit a quarter of the free device memory, and a depth
changed under a running array Feeder loses and reorders nothing."""

import time

import numpy as np
import pytest

import theano_queue as tq
from theano_queue.core.target import gpu_free_bytes, ring_bytes
from theano_queue.feed.tune_capacity import AUTO_DEVICE_SHARE, Window

pytestmark = pytest.mark.gpu


def test_device_memory_is_part_of_the_budget_and_changes_lose_nothing():
    spec = [("i", "int64", (32,)), ("x", "float32", (32, 1 << 12))]
    probe = tq.Queue(spec, capacity=1)
    slot, free = ring_bytes(probe.components, 1), gpu_free_bytes(probe.port.target)
    del probe
    q = tq.Queue(spec, capacity="auto", memory_budget=1 << 40)
    assert q.stats()["slots"] * slot <= max(2 * slot, AUTO_DEVICE_SHARE * free)
    tuner = q._auto
    tuner.stop()
    n = 32 * 200
    grow = Window(1.0, 50, 0.3, 0.2, 0.5)
    shrink = Window(1.0, 50, 0.0, 0.9, 16.0)
    seen = []
    with tq.Feeder(q, (np.arange(n), np.zeros((n, 1 << 12), "float32"))):
        for k in range(n // 32):
            if k % 10 == 0:
                tuner.step(grow if k % 20 == 0 else shrink)
            seen.extend(np.asarray(q.get()[0]).tolist())
            time.sleep(0.001)
    assert seen == list(range(n))
    assert len(q.port.auto.as_dict()["history"]) >= 2
