"""What PyMC3 asks of the Theano Dequeue: no gradient through it, and test values when compute_test_value is on."""

import numpy as np
import pytest
import theano
import theano.tensor as T

import theano_queue as tq
from theano_queue.graph.theano import Dequeue


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


def test_dequeued_before_compute_test_value_is_on_still_have_test_values():
    """The doc's order: q.dequeue() first, then the PyMC3 model (which turns compute_test_value on)."""
    q = make_queue()
    q.put(np.ones((4, 3), "float32"), np.arange(4, dtype="int32"))
    x, y = q.dequeue()
    with theano.change_flags(compute_test_value="raise"):
        total = (x.sum(1) + y).sum()
    assert float(total.tag.test_value) == 0.0
    assert x.tag.test_value.shape == (4, 3) and y.tag.test_value.dtype == np.int32
    assert q.size() == 1


def test_clone_keeps_the_dequeue_node():
    """theano.clone of a cost on dequeued data shares the Dequeue: the clone means the same batch, not a new one."""
    q = make_queue()
    x, y = q.dequeue()
    w = theano.shared(np.ones(3, "float32"), name="w")
    w2 = theano.shared(np.full(3, 2, "float32"), name="w2")
    cost = (T.dot(x, w) - y).sum()
    cloned = theano.clone(cost, {w: w2})
    nodes = [v.owner for v in theano.gof.graph.ancestors([cloned]) if v.owner]
    dequeues = [node for node in nodes if isinstance(node.op, Dequeue)]
    assert dequeues and all(node is x.owner for node in dequeues)
    f = theano.function([], [cost, cloned])
    q.put(np.ones((4, 3), "float32"), np.zeros(4, "int32"))
    q.put(np.ones((4, 3), "float32"), np.zeros(4, "int32"))
    assert np.allclose(f(), [12.0, 24.0])
    assert q.size() == 1  # one element per call


def test_scan_over_samples_on_a_placeholder_then_the_queue_takes_one_element_a_step():
    """PyMC3's fit(obj_n_mc > 1, more_replacements={placeholder: dequeued}): a scan over clones of the cost, one
    per posterior sample, built on a placeholder that is replaced by the dequeued variable afterwards, so the
    Dequeue stays outside the scan's loop: one element a step, and the gradient walks past it."""
    q = make_queue()
    x, y = q.dequeue()
    x_ph = theano.shared(np.zeros((4, 3), "float32"), name="x_placeholder")
    y_ph = theano.shared(np.zeros(4, "int32"), name="y_placeholder")
    w = theano.shared(np.ones(3, "float32"), name="w")
    cost = ((T.dot(x_ph, w) - y_ph) ** 2).sum()
    samples = T.stack([w, 2 * w, 3 * w])
    costs, _ = theano.scan(lambda v: theano.clone(cost, {w: v}), sequences=samples)
    total = theano.clone(costs.sum(), {x_ph: x, y_ph: y})
    f = theano.function([], theano.grad(total, w))
    for _ in range(2):
        q.put(np.ones((4, 3), "float32"), np.zeros(4, "int32"))
    # d/dw sum_k sum_rows (k x.w)^2 = sum_k 2 k^2 (x.w) x over 4 rows; x.w = 3: 2 * 14 * 3 * 4 = 336 each
    assert np.allclose(f(), 336.0)
    assert q.size() == 1


def pymc3_example():
    """examples/pymc3_advi.py with PyMC3's shims applied, or a skip where PyMC3 is not installed."""
    import importlib.util
    import os

    if importlib.util.find_spec("pymc3") is None:
        pytest.skip("PyMC3 3.9.3 is not installed (scripts/install-pymc3.sh makes its venv)")
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "pymc3_advi.py")
    spec = importlib.util.spec_from_file_location("pymc3_advi", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.shim_pymc3()  # before PyMC3 is imported, and only where it is installed
    return example


@pytest.mark.timeout(900)
@pytest.mark.parametrize("obj_n_mc", [1, 3])
def test_pymc3_fit_fed_by_the_queue(obj_n_mc, capsys):
    """A short ADVI fit in PyMC3 on the queue's data (and on pm.Minibatch): one batch per step, a finite loss."""
    example = pymc3_example()
    import pymc3 as pm

    args = example.parse(["--samples", "4000", "--batch", "100", "--iterations", "60", "--obj-n-mc", str(obj_n_mc)])
    x_all, y_all = example.make_data(args.samples, args.features, args.seed)
    with theano.change_flags(floatX="float64"):
        _, means, hist = example.fit_queue(pm, x_all, y_all, args)  # raises unless it took one batch per step
    assert means.shape == (args.features,) and np.all(np.isfinite(means))
    assert len(hist) == args.iterations and np.all(np.isfinite(hist))
