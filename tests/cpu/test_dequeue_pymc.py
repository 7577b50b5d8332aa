"""What PyMC3 asks of the Theano Dequeue: no gradient through it, and test values when compute_test_value is on."""

import numpy as np
import pytest
import theano
import theano.tensor as T

import theano_queue as tq


def make_queue():
    return tq.Queue([("x", "float32", (4, 3)), ("y", "int32", (4,))], capacity=2, timeout=5)


def test_gradient_of_a_cost_on_dequeued_data_skips_the_dequeue():
    """The cost depends on the parameters and on the data; the data's Op has no gradient and says so."""
    q = make_queue()
    x, y = q.dequeue()
    w = theano.shared(np.ones(3, "float32"), name="w")
    cost = ((T.dot(x, w) - y) ** 2).sum()
    token = x.owner.inputs[0]
    # Reaching the Dequeue is what PyMC3's fit(obj_n_mc > 1) does: it must not raise.
    g_w, g_token = theano.grad(cost, [w, token], disconnected_inputs="ignore", return_disconnected="None")
    assert g_token is None
    f = theano.function([], g_w)
    q.put(np.ones((4, 3), "float32"), np.zeros(4, "int32"))
    assert np.allclose(f(), 2 * 3.0 * 4)  # d/dw sum((x.w - 0)^2) = 2 * 3 * sum of ones over 4 rows
    assert q.size() == 0


def test_dequeue_grad_says_disconnected():
    q = make_queue()
    node = q.dequeue()[0].owner
    assert node.op.connection_pattern(node) == [[False, False]]
    (g,) = node.op.grad(node.inputs, [None, None])
    assert isinstance(g.type, theano.gradient.DisconnectedType)


@pytest.mark.parametrize("setting", ["raise", "warn"])
def test_dequeued_variables_have_test_values_when_asked_and_take_nothing(setting):
    q = make_queue()
    q.put(np.ones((4, 3), "float32"), np.arange(4, dtype="int32"))
    with theano.change_flags(compute_test_value=setting):
        x, y = q.dequeue()
        total = (x.sum(1) + y).sum()  # Theano computes downstream test values from them
    assert x.tag.test_value.shape == (4, 3) and x.tag.test_value.dtype == np.float32
    assert y.tag.test_value.shape == (4,) and y.tag.test_value.dtype == np.int32
    assert float(total.tag.test_value) == 0.0
    assert q.size() == 1  # building the graph took no element


def test_no_test_values_by_default():
    x, _ = make_queue().dequeue()
    assert not hasattr(x.tag, "test_value")
