"""Dequeue and Enqueue as PyTensor graphs, under the C linker and under Numba."""

import inspect
import subprocess
import sys
import threading
import time

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import theano_queue
import theano_queue.pytensor as tq
from theano_queue.graph import pytensor as ops


def batch(i, rows=4):
    return np.full((rows, 3), i, "float32"), np.arange(rows, dtype="int32") + 10 * i


def make_queue(capacity=4, **kwargs):
    return tq.Queue([("x", "float32", (4, 3)), ("y", "int32", (4,))], capacity=capacity, **kwargs)


def test_import_needs_no_theano_and_default_mode_runs_with_no_flags(tmp_path):
    # The default linker is the installed PyTensor's: Numba on 3.0, the C
    # linker (VMLinker) on 2.38, PyMC 5.28's pin.
    script = (
        "import sys, numpy as np, pytensor\n"
        "import theano_queue.pytensor as tq\n"
        "q = tq.Queue([('x', 'float64', (2,))])\n"
        "f = pytensor.function([], q.dequeue() * 2)\n"
        "q.put(np.array([1.0, 2.0]))\n"
        "default = type(pytensor.compile.mode.get_default_mode().linker).__name__\n"
        "print(f().tolist(), 'theano' in sys.modules, type(f.maker.linker).__name__, default)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONSAFEPATH": "1", "HOME": str(tmp_path)}  # no PYTENSOR_FLAGS
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    *values, theano_imported, linker, default = out.stdout.split()
    assert values == ["[2.0,", "4.0]"] and theano_imported == "False"
    expected = "NumbaLinker" if int(pytensor.__version__.split(".")[0]) >= 3 else "VMLinker"
    assert linker == default == expected


def test_elements_come_in_order_and_two_dequeues_take_two(mode):
    q = make_queue()
    (x1, y1), (x2, y2) = q.dequeue(), q.dequeue()
    f = pytensor.function([], [x1.sum(), y1, x2.sum(), y2], mode=mode)
    for i in range(4):
        q.put(*batch(i))
    first, second = f(), f()
    assert [float(first[0]), float(first[2]), float(second[0]), float(second[2])] == [0.0, 12.0, 24.0, 36.0]
    assert np.array_equal(first[1], batch(0)[1]) and np.array_equal(second[3], batch(3)[1])
    assert q.size() == 0


def test_partial_batch_keeps_its_length(mode):
    q = make_queue()
    x, y = q.dequeue()
    f = pytensor.function([], [x, y, x.shape[0]], mode=mode)
    q.put(*batch(1))
    q.put(*batch(2, rows=3))
    full, partial = f(), f()
    assert full[0].shape == (4, 3) and int(full[2]) == 4
    assert partial[0].shape == (3, 3) and int(partial[2]) == 3
    assert np.array_equal(partial[1], batch(2, rows=3)[1])


def test_enqueue_puts_one_element_per_call(mode):
    q = make_queue()
    k = pt.lscalar("k")
    size = q.enqueue(pt.cast(pt.ones((2, 3)) * k, "float32"), pt.cast(pt.arange(2) + k, "int32"))
    f = pytensor.function([k], size, mode=mode)
    assert [int(f(5)), int(f(7))] == [1, 2]
    x, y = q.get()
    assert np.array_equal(x, np.full((2, 3), 5, "float32")) and y.tolist() == [5, 6]


def test_one_function_dequeues_and_enqueues(mode):
    src, dst = make_queue(), make_queue()
    x, y = src.dequeue()
    f = pytensor.function([], dst.enqueue(x * 2, y + 1), mode=mode)
    src.put(*batch(3))
    assert int(f()) == 1
    x2, y2 = dst.get()
    assert np.array_equal(x2, batch(3)[0] * 2) and np.array_equal(y2, batch(3)[1] + 1)


def test_dequeues_are_never_folded_or_merged_and_keep_their_creation_order(mode):
    q = make_queue(capacity=8)
    a, _ = q.dequeue()
    b, _ = q.dequeue()
    c, _ = q.dequeue()
    f = pytensor.function([], [c, b, a], mode=mode)  # outputs against the creation order
    nodes = [n for n in f.maker.fgraph.apply_nodes if isinstance(n.op, ops.Dequeue)]
    assert len(nodes) == 3
    for i in range(6):
        q.put(*batch(i))
    assert [float(v[0, 0]) for v in f()] == [2.0, 1.0, 0.0]
    assert [float(v[0, 0]) for v in f()] == [5.0, 4.0, 3.0]


def test_c_linker_runs_the_c_code(monkeypatch):
    """Under CVM the compiled Op runs, not perform: perform raising changes nothing."""

    def refuse(*args, **kwargs):
        raise AssertionError("perform ran under the C linker")

    monkeypatch.setattr(ops.Dequeue, "perform", refuse)
    q = make_queue()
    x, _ = q.dequeue()
    f = pytensor.function([], x * 1, mode="CVM")
    q.put(*batch(2))
    assert float(f()[0, 0]) == 2.0


def test_dequeued_variables_broadcast_as_their_components_declare():
    """The Theano front end's convention (Component.broadcastable), on PyTensor's static shapes."""
    q = tq.Queue([("x", "float32", (4, 1, 2))])
    assert q.dequeue().type.broadcastable == q.components[0].broadcastable
    assert q.dequeue().type.shape[0] is None  # the batch axis: partial batches are shorter


def test_declared_broadcastable_axis_broadcasts():
    if "broadcastable" not in inspect.signature(theano_queue.Queue.__init__).parameters:
        pytest.skip("Queue(broadcastable=...) comes with issue 19")
    q = tq.Queue([("x", "float32", (4, 1)), ("y", "float32", (4, 1))], broadcastable={"x": (1,)})
    x, y = q.dequeue()
    assert x.type.broadcastable == (False, True) and y.type.broadcastable == (False, False)


def test_bad_enqueue_variable_names_the_component():
    q = make_queue()
    # The dtype by the schema's rule, worded as for an array (theano_queue/core/schema.py, graph_value).
    with pytest.raises(TypeError, match="component 'y': expected dtype int32, got float64, which does not cast"):
        q.enqueue(pt.ones((2, 3), "float32"), pt.ones((2,)))
    with pytest.raises(TypeError, match="component 'y': expected a 1-d int32 variable, got 2-d int32"):
        q.enqueue(pt.ones((2, 3), "float32"), pt.ones((2, 2), "int32"))


def test_bad_put_leaves_the_queue_usable(mode):
    q = make_queue()
    x, y = q.dequeue()
    f = pytensor.function([], y, mode=mode)
    with pytest.raises(TypeError, match="'y'"):
        q.put(np.zeros((4, 3), "float32"), np.zeros(4, "float64"))
    with pytest.raises(ValueError, match="'x'"):
        q.put(np.zeros((5, 3), "float32"), np.zeros(5, "int32"))
    q.put(*batch(1))
    assert f().tolist() == batch(1)[1].tolist()


def test_gpu_target_is_refused_naming_the_queue():
    with pytest.raises(ValueError, match=r"Queue 'batches': target 'cuda0'; .*host memory"):
        make_queue(target="cuda0", name="batches")
    with pytest.raises(ValueError, match=r"Queue 'queue\d+': target 'cuda0'"):  # the name it would have had
        make_queue(target="cuda0")


def test_close_then_drained_raises_queue_closed(mode):
    q = make_queue()
    x, _ = q.dequeue()
    f = pytensor.function([], x, mode=mode)
    q.put(*batch(1))
    q.close()
    assert float(f()[0, 0]) == 1.0
    with pytest.raises(tq.QueueClosed, match="Dequeue"):
        f()
    q.reopen()
    q.put(*batch(2))
    assert float(f()[0, 0]) == 2.0


def test_a_dequeue_on_an_ended_run_says_which_call_reached_it(mode):
    q = make_queue()
    x, _ = q.dequeue()
    f = pytensor.function([], x, mode=mode)
    q.close()
    line = inspect.currentframe().f_lineno + 2  # the call below
    with pytest.raises(tq.QueueClosed, match=r"reached by test_ops\.py:%d\b" % line) as raised:
        f()
    assert str(raised.value).count("reached by") == 1  # once, though PyTensor re-raises it


def test_cancel_wakes_a_blocked_dequeue(mode):
    q = make_queue()
    x, _ = q.dequeue()
    f = pytensor.function([], x, mode=mode)
    q.put(*batch(1))
    timer = threading.Timer(0.3, q.close, kwargs={"cancel_pending": True})
    f()  # takes the one element
    timer.start()
    start = time.monotonic()
    with pytest.raises(tq.QueueClosed):
        f()
    assert time.monotonic() - start < 30
    timer.join()


def test_timeout_raises_and_keeps_the_queue_usable(mode):
    q = make_queue(timeout=0.2)
    x, _ = q.dequeue()
    f = pytensor.function([], x, mode=mode)
    with pytest.raises(tq.QueueTimeout):
        f()
    q.put(*batch(4))
    assert float(f()[0, 0]) == 4.0


def test_deleted_queue_is_a_clear_error(mode):
    q = make_queue()
    x, _ = q.dequeue()
    f = pytensor.function([], x, mode=mode)
    del q
    with pytest.raises(tq.QueueError, match="deleted"):
        f()


@pytest.mark.parametrize("linker", ["CVM", "NUMBA"])
def test_ctrl_c_interrupts_a_blocked_dequeue(linker):
    # The first call runs once before the blocking one: Numba compiles the
    # graph at its first call, and llvmlite drops a KeyboardInterrupt that
    # lands in its compile callbacks ("Exception ignored on calling ctypes
    # callback function"), which is Numba's to fix, not the queue's wait.
    script = (
        # SIGINT as a terminal's program has it, even where the test run was started with it ignored.
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import sys, pytensor\n"
        "import theano_queue.pytensor as tq\n"
        "q = tq.Queue([('x', 'float32', (2,))])\n"
        "f = pytensor.function([], q.dequeue(), mode=%r)\n"
        "q.put([1, 2])\n"
        "f()\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    f()\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(3)\n" % linker
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()[-3000:]
        time.sleep(0.5)  # let it block
        proc.send_signal(2)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 3, proc.stderr.read()[-3000:]


def test_whole_graph_c_linker_compiles_both_ops_in_one_module():
    """PyTensor's "C" mode links every node into one C module: the two Ops' support code must not clash."""
    src, dst = make_queue(), make_queue()
    x, y = src.dequeue()
    f = pytensor.function([], [dst.enqueue(x + 1, y), x.sum()], mode="C")
    src.put(*batch(2))
    size, total = f()
    assert int(size) == 1 and float(total) == 24.0
    assert np.array_equal(dst.get()[0], batch(2)[0] + 1)


def test_gradient_of_a_cost_on_dequeued_data_skips_the_dequeue(mode):
    """The Op says that no gradient flows through it (NotImplementedError before): pm.fit(obj_n_mc > 1) needs it."""
    q = make_queue()
    x, y = q.dequeue()
    w = pytensor.shared(np.ones(3, "float32"), name="w")
    cost = ((pt.dot(x, w) - y) ** 2).sum()
    token = x.owner.inputs[0]
    g_w, g_token = pytensor.grad(cost, [w, token], disconnected_inputs="ignore", return_disconnected="none")
    assert g_token is None
    f = pytensor.function([], g_w, mode=mode)
    q.put(np.ones((4, 3), "float32"), np.zeros(4, "int32"))
    assert np.allclose(f(), 2 * 3.0 * 4)
    node = x.owner
    assert node.op.connection_pattern(node) == [[False, False]]


def test_numba_is_optional_where_pytensor_does_not_need_it(tmp_path):
    """PyMC 5 does not require Numba: without it the queue serves the C linker."""
    if int(pytensor.__version__.split(".")[0]) >= 3:
        pytest.skip("PyTensor 3 requires Numba")
    script = (
        "import sys; sys.modules['numba'] = None\n"
        "import numpy as np, pytensor\n"
        "import theano_queue.pytensor as tq\n"
        "q = tq.Queue([('x', 'float64', (2,))])\n"
        "f = pytensor.function([], q.dequeue() * 2, mode='CVM')\n"
        "q.put(np.array([1.0, 2.0]))\n"
        "print(f().tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["[2.0,", "4.0]"]


def test_each_front_end_says_what_to_install_where_its_library_is_missing(tmp_path):
    script = (
        "import sys; sys.modules[sys.argv[1]] = None\n"
        "import numpy as np, theano_queue\n"
        "try:\n"
        "    theano_queue.Queue([('x', 'float64', (2,))]).dequeue() if sys.argv[1] == 'theano' else None\n"
        "    import theano_queue.pytensor\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    for library, advice in [("theano", "pip install 'theano_queue[theano]'"), ("pytensor", "[pytensor]'")]:
        out = subprocess.run(
            [sys.executable, "-c", script, library], capture_output=True, text=True, cwd=tmp_path, timeout=300
        )
        assert out.returncode == 0 and advice in out.stdout, (out.stdout, out.stderr[-3000:])


def test_an_enqueue_refuses_rows_that_differ_naming_the_op(mode):
    # The check of the whole element runs when the function runs: the C linker's C, Numba's perform.
    q = make_queue()
    x, y = pt.matrix("x", dtype="float32"), pt.vector("y", dtype="int32")
    put = pytensor.function([x, y], q.enqueue(x, y), mode=mode)
    with pytest.raises(ValueError) as err:
        put(*batch(0)[:1], np.arange(3, dtype="int32"))
    assert str(err.value).split("\nApply node")[0] == (
        "Enqueue: Queue '%s': component 'x' has 4 rows and component 'y' 3; the components of an element share "
        "their leading (batch) axis (declare a leading axis of a component's own as tq.own(n))" % q.name
    )
    assert q.size() == 0
    put(*batch(1))
    assert q.size() == 1


def test_an_integer_that_does_not_fit_is_refused_on_numpy_2():
    q = tq.Queue([("y", "int64", (2,)), ("u", "uint64", (2,))], target="cpu", name="wide")
    for y, u, what in (([2**63, 2**63], [0, 0], "int64; these uint64"), ([0, 0], [-1, 0], "uint64; these int64")):
        with pytest.raises(TypeError, match="expected values that fit dtype %s values do not" % what):
            q.put(y, u)
    q.put([2**63 - 1, -(2**63)], [2**64 - 1, 0])
    y, u = q.get()
    assert y.tolist() == [2**63 - 1, -(2**63)] and u.tolist() == [2**64 - 1, 0]
    with pytest.raises(TypeError, match="expected values that fit dtype int64; these int values do not"):
        q.put([2**64, 0], [0, 0])
