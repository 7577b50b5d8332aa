"""The GPU half of tests/cpu/test_feed_defects.py: a Fortran-order array fed into a GPU queue.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_feed_defects_gpu.py``."""

import numpy as np
import pytest
from helpers import drain

import theano_queue as tq

pytestmark = pytest.mark.gpu


@pytest.mark.gpu
def test_a_fortran_order_array_feeds_a_gpu_queue_bit_exact():
    data = np.asfortranarray(np.random.default_rng(0).standard_normal((40, 3)).astype("float32"))
    q = tq.Queue([("x", "float32", (4, 3)), ("y", "int64", (4,))], capacity=2)
    assert q.on_gpu
    with tq.Feeder(q, (data, np.arange(40)), shuffle=True, seed=2) as feeder:
        got = drain(q)
    assert feeder.stats()["gather"] == {"x": "host", "y": "host"} and len(got) == 10
    for x, y in got:
        assert np.array_equal(x, data[y])
