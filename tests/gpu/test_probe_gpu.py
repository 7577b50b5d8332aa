"""The GPU half of tests/standin/test_probe.py: bandwidth and the self-check on a real GPU.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_probe_gpu.py``."""

import pytest
from fake_cuda import NOTHING_HELD, fake_cuda, held  # noqa: F401  (fake_cuda is a fixture)

from theano_queue.tools import probe

pytestmark = pytest.mark.gpu

MiB = 1 << 20


@pytest.mark.gpu
def test_real_gpu_bandwidth_and_theano_context():
    import theano  # noqa: F401  (Theano runs on the GPU: the default device is its)

    from theano_queue.core.target import theano_gpu_contexts

    contexts = theano_gpu_contexts()
    name = None if None in contexts else contexts[0]
    assert probe.theano_device(name) >= 0
    pinned = 64 * MiB / probe.h2d_seconds(64 * MiB, 10, name) / 1e9
    pageable = 64 * MiB / probe.h2d_seconds(64 * MiB, 10, name, pinned=False) / 1e9
    assert pinned > 5 and pinned > pageable
    assert probe.self_check(probe.theano_device(name)) == {
        "pinned_memory": (True, "cuMemHostAlloc of 2097152 bytes"),
        "copy_engine": (True, "1048576 bytes to the device and back on a non-blocking stream: identical"),
    }
    assert all(d["free_bytes"] > 0 for d in probe.devices())
