"""Queue(capacity="auto") on a GPU target without a GPU: the device's free memory is part of the ring's budget
(issue 44.2).  The GPU's free memory is the stand-in's; tests/gpu/test_auto_capacity_gpu.py runs it on a GPU."""

import theano_queue as tq
from theano_queue.core import target as _target
from theano_queue.core.target import Target, ring_bytes
from theano_queue.feed.tune_capacity import AUTO_DEVICE_SHARE

SPEC = [("x", "float32", (64, 1024)), ("y", "int32", (64,))]


def test_the_free_device_memory_caps_the_slots(monkeypatch):
    components = tq.Queue(SPEC, capacity=1, target="cpu").components
    slot = ring_bytes(components, 1)
    gpu = Target("gpu", True)
    monkeypatch.setattr(_target, "gpu_free_bytes", lambda target: int(6 * slot / AUTO_DEVICE_SHARE))
    assert _target.auto_slots(gpu, components, 1 << 30, "q") == 6  # the device holds fewer than the host budget
    monkeypatch.setattr(_target, "gpu_free_bytes", lambda target: 1 << 40)
    assert _target.auto_slots(gpu, components, 3 * slot, "q") == 3  # the host budget is the smaller
    assert _target.auto_slots(Target("cpu", False), components, 5 * slot, "q") == 5  # no device asked on the CPU
