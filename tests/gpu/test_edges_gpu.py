"""The GPU half of tests/cpu/test_edges.py: a GpuEnqueue refuses components whose rows differ, naming itself,
before it takes a slot, and the queue stays usable.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_edges_gpu.py``."""

import numpy as np
import pytest
import theano
import theano.tensor as T

import theano_queue as tq
from theano_queue.graph.theano_gpu import GpuEnqueue

pytestmark = pytest.mark.gpu


def test_a_gpu_enqueue_refuses_rows_that_differ_naming_the_op():
    q = tq.Queue([("x", "float32", (4, 3)), ("y", "int32", (4,)), ("w", "float32", (tq.own(5),))], capacity=2)
    assert q.on_gpu
    x, y, w = T.matrix("x", dtype="float32"), T.vector("y", dtype="int32"), T.vector("w", dtype="float32")
    put = theano.function([x, y, w], q.enqueue(x, y, w))
    assert any(isinstance(node.op, GpuEnqueue) for node in put.maker.fgraph.toposort())
    with pytest.raises(ValueError) as err:
        put(np.zeros((4, 3), "float32"), np.arange(3, dtype="int32"), np.ones(5, "float32"))
    assert str(err.value).split("\nApply node")[0] == (
        "GpuEnqueue: Queue '%s': component 'x' has 4 rows and component 'y' 3; the components of an element "
        "share their leading (batch) axis (declare a leading axis of a component's own as tq.own(n))" % q.name
    )
    assert q.size() == 0
    put(np.zeros((2, 3), "float32"), np.arange(2, dtype="int32"), np.ones(3, "float32"))  # w's axis is its own
    x_got, y_got, w_got = q.get()
    assert (len(x_got), len(y_got), len(w_got)) == (2, 2, 3)
