"""The GPU half of tests/cpu/test_ops.py: GPU-dequeued variables take givens.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_ops_gpu.py``."""

import numpy as np
import pytest
import theano
import theano.tensor as T

import theano_queue as tq

pytestmark = pytest.mark.gpu


@pytest.mark.gpu
def test_gpu_dequeued_variables_take_givens_of_plain_tensors():
    """On a GPU queue the lifted GpuDequeue keeps the convention: no axis broadcasts unless declared."""
    q = tq.Queue([("x", "float32", (50, 1, 28, 28))], broadcastable=None)
    declared = tq.Queue([("x", "float32", (50, 1, 28, 28))], broadcastable={"x": (1,)})
    assert q.on_gpu and declared.on_gpu
    qx, dx = q.dequeue(), declared.dequeue()
    images = np.full((50, 1, 28, 28), 2, "float32")
    v = T.tensor4("v")
    assert theano.function([v], qx.mean(), givens={qx: v})(images) == pytest.approx(2.0)
    q.put(images)
    declared.put(images)
    assert theano.function([], qx.mean())() == pytest.approx(2.0)
    colour = T.tensor4("colour")
    shape = theano.function([colour], (dx * colour).shape)(np.ones((50, 3, 28, 28), "float32"))
    assert list(shape) == [50, 3, 28, 28]
