"""The GPU half of tests/cpu/test_arrays.py: array datasets fed into a GPU queue, bit-exact.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_arrays_gpu.py``."""

import numpy as np
import pytest
import theano
from arrays_helpers import check_bit_exact, rows_of

import theano_queue as tq

pytestmark = pytest.mark.gpu


@pytest.mark.gpu
@pytest.mark.parametrize("feat,dtype", [(13, "float32"), (3, "uint8"), (784, "float32"), (3072, "float32")])
def test_array_feeder_into_a_gpu_queue_bit_exact(feat, dtype):
    n, batch = 2000, 256
    x = np.random.default_rng(feat).integers(0, 200, size=(n, feat)).astype(dtype)
    q = tq.Queue([("x", dtype, (batch, feat)), ("i", "int64", (batch,))], capacity=3)
    assert q.on_gpu
    xv, iv = q.dequeue()
    f = theano.function([], [xv, iv])
    got = []
    with tq.Feeder(q, (x, np.arange(n)), shuffle=True, seed=5, epochs=2):
        while True:
            try:
                xb, ids = f()
            except tq.QueueClosed:
                break
            got.append((np.asarray(xb), np.asarray(ids)))
    check_bit_exact(got, x)
    assert sorted(rows_of(got)) == sorted(list(range(n)) * 2)
