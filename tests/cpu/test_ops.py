"""Dequeue and Enqueue inside compiled Theano functions."""

import gc
import os
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
import theano
import theano.tensor as T
from helpers import TAGGED, seconds_to_stop_on_ctrl_c, two_producers_exactly_once
from theano.compile.mode import Mode

import theano_queue as tq
from theano_queue.graph.theano import SECOND_THREAD

XY = [("x", "float32", (4, 3)), ("y", "int32", (4,))]


def xy(value, rows=4):
    return np.full((rows, 3), value, "float32"), np.arange(rows, dtype="int32") + int(value)


def test_function_takes_a_new_element_every_call():
    q = tq.Queue(XY, capacity=4, target="cpu")
    x, y = q.dequeue()
    f = theano.function([], [x * 2, y])
    for i in range(3):
        q.put(*xy(i))
    for i in range(3):
        x2, y_ = f()
        np.testing.assert_array_equal(x2, 2 * xy(i)[0])
        np.testing.assert_array_equal(y_, xy(i)[1])
    assert q.size() == 0


def test_not_constant_folded_at_compile_time():
    q = tq.Queue(XY, capacity=2, target="cpu")
    x, _ = q.dequeue()
    q.put(*xy(1))
    f = theano.function([], x.sum())
    assert q.size() == 1, "compiling must not take an element"
    assert f() == 12
    q.put(*xy(2))
    assert f() == 24


def test_partial_batch_changes_the_variables_length():
    q = tq.Queue(XY, capacity=2, target="cpu")
    x, y = q.dequeue()
    f = theano.function([], [x.shape[0], y.sum()])
    q.put(*xy(1, rows=4))
    q.put(*xy(1, rows=2))
    assert [int(v) for v in f()] == [4, 4 * 1 + 6]
    assert [int(v) for v in f()] == [2, 2 * 1 + 1]


@pytest.mark.filterwarnings("ignore::theano_queue.core.errors.SeveralDequeuesWarning")  # two elements a call: meant
def test_two_dequeue_nodes_take_two_elements_in_graph_order():
    q = tq.Queue(XY, capacity=4, target="cpu")
    first, _ = q.dequeue()
    second, _ = q.dequeue()
    # Ask for them in the opposite order: the order they were made decides.
    f = theano.function([], [second[0, 0], first[0, 0]])
    for i in range(4):
        q.put(*xy(i))
    assert [float(v) for v in f()] == [1.0, 0.0]
    assert [float(v) for v in f()] == [3.0, 2.0]


def test_dequeues_of_two_queues_with_same_spec_are_not_merged():
    a = tq.Queue(XY, target="cpu", name="a")
    b = tq.Queue(XY, target="cpu", name="b")
    f = theano.function([], [a.dequeue()[0].sum(), b.dequeue()[0].sum()])
    a.put(*xy(1))
    b.put(*xy(2))
    assert [float(v) for v in f()] == [12.0, 24.0]


def test_end_of_epoch_and_reopen_without_recompiling():
    q = tq.Queue(XY, capacity=2, target="cpu")
    x, _ = q.dequeue()
    f = theano.function([], x.sum())
    for epoch in range(2):
        for _ in range(1):
            q.put(*xy(epoch + 1))
        q.close()
        assert f() == 12 * (epoch + 1)
        with pytest.raises(tq.QueueClosed):
            f()
        q.reopen()


def test_in_graph_enqueue_into_a_second_queue():
    source = tq.Queue(XY, capacity=2, target="cpu", name="source")
    sink = tq.Queue([("x", "float32", (4, 3)), ("n", "int64", ())], capacity=2, target="cpu", name="sink")
    x, _ = source.dequeue()
    size = sink.enqueue(x * 10, T.cast(x.shape[0], "int64"))
    produce = theano.function([], size)
    consume = theano.function([], sink.dequeue())

    source.put(*xy(1, rows=3))
    assert int(produce()) == 1
    x_out, n_out = consume()
    np.testing.assert_array_equal(x_out, 10 * xy(1, rows=3)[0])
    assert int(n_out) == 3


def test_enqueue_takes_a_mapping_and_checks_types():
    q = tq.Queue(XY, target="cpu")
    xs, ys = T.fmatrix("xs"), T.ivector("ys")
    put = theano.function([xs, ys], q.enqueue({"x": xs, "y": ys}))
    assert int(put(*xy(3))) == 1
    np.testing.assert_array_equal(q.get()[1], xy(3)[1])
    with pytest.raises(TypeError, match="component 'y': expected a 1-d int32 variable, got 2-d int32"):
        q.enqueue(xs, T.imatrix())
    # The dtype by the schema's rule (theano_queue/core/schema.py), as for an array: refused where it does not cast
    # safely, cast in the graph where it does.
    with pytest.raises(TypeError, match="component 'y': expected dtype int32, got float32, which does not cast"):
        q.enqueue(xs, T.fvector())
    small = T.bvector("small")
    put = theano.function([xs, small], q.enqueue(xs, small))
    put(xy(3)[0], np.arange(4, dtype="int8"))
    assert q.get()[1].tolist() == [0, 1, 2, 3]


def test_in_graph_enqueue_refuses_a_bad_shape_and_keeps_the_queue():
    q = tq.Queue(XY, capacity=2, target="cpu", name="kept")
    xs, ys = T.fmatrix("xs"), T.ivector("ys")
    put = theano.function([xs, ys], q.enqueue(xs, ys))
    put(*xy(1))
    expected = r"Queue 'kept', component 'x': expected shape \(<=4, 3\), got \(4, 5\)"
    with pytest.raises(ValueError, match=expected):
        put(np.zeros((4, 5), "float32"), np.zeros(4, "int32"))
    assert q.size() == 1 and q.get()[0][0, 0] == 1


def test_functions_of_queues_with_the_same_spec_share_compiled_code():
    def compile_for(name, dtype="float64"):
        q = tq.Queue([("w", dtype, (3, 3))], target="cpu", name=name)
        return q, theano.function([], q.dequeue())

    def module(f):
        thunk = f.fn.thunks[0]
        assert thunk.cthunk is not None, "the dequeue runs its C code"
        return thunk.thunk.module

    q1, f1 = compile_for("first")
    q2, f2 = compile_for("second")
    q3, f3 = compile_for("third", "float32")
    assert module(f1) is module(f2), "two queues of one spec share one compiled module"
    assert module(f3) is not module(f1), "another dtype is other code"
    q1.put(np.eye(3))
    q2.put(2 * np.eye(3))
    assert f1()[0, 0] == 1 and f2()[0, 0] == 2


def test_python_linker_uses_perform():
    q = tq.Queue(XY, capacity=2, target="cpu")
    x, y = q.dequeue()
    sink = tq.Queue(XY, target="cpu")
    size = sink.enqueue(x, y)
    f = theano.function([], [x.sum(), size], mode=Mode(linker="py", optimizer="fast_compile"))
    q.put(*xy(2))
    total, after = f()
    assert float(total) == 24 and int(after) == 1
    np.testing.assert_array_equal(sink.get()[1], xy(2)[1])


def test_deleted_queue_gives_a_clear_error():
    q = tq.Queue(XY, target="cpu", name="gone")
    x, _ = q.dequeue()
    f = theano.function([], x.sum())
    del q
    gc.collect()
    with pytest.raises(tq.QueueError, match="Dequeue: its queue was deleted while a compiled function still uses it"):
        f()


def test_timeout_in_a_function():
    q = tq.Queue(XY, target="cpu", timeout=0.1)
    f = theano.function([], q.dequeue()[0])
    with pytest.raises(tq.QueueTimeout, match="Dequeue: queue '.*': no element within 0.1 s"):
        f()
    q.put(*xy(4))
    assert f()[0, 0] == 4  # still usable


def test_exactly_once_through_a_function_with_two_producers():
    q = tq.Queue(TAGGED, capacity=3, target="cpu")
    data, tag = q.dequeue()
    two_producers_exactly_once(q, theano.function([], [data, tag]), per_producer=5000)


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import theano, theano_queue as tq
    q = tq.Queue([("x", "float32", (2,))], target="cpu")
    f = theano.function([], q.dequeue())
    print("ready", flush=True)
    try:
        f()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
    """
)


def test_ctrl_c_stops_a_blocked_dequeue():
    # The wait checks for signals every 50 ms (doc/design.rst); the rest of the bound is a loaded
    # machine's scheduling of the woken process.  A wait that never checked would hang.
    elapsed = seconds_to_stop_on_ctrl_c(CTRL_C_SCRIPT, dict(os.environ))
    assert elapsed < 2.0, "took %.3f s to reach Python" % elapsed


def test_an_unused_dequeue_is_pruned_and_takes_nothing():
    # Documented in Queue.dequeue: Theano compiles only what the outputs need.
    q = tq.Queue(XY, capacity=4, target="cpu")
    x1, _ = q.dequeue()
    q.dequeue()  # a second dequeue in the graph that no output uses
    f = theano.function([], x1.sum())
    for i in range(4):
        q.put(*xy(i))
    assert [float(f()) for _ in range(2)] == [0.0, 12.0]
    assert q.size() == 2


def test_debug_mode_is_refused_before_anything_is_taken():
    q = tq.Queue(XY, capacity=4, target="cpu", name="checked")
    q.put(*xy(1))
    q.put(*xy(2))
    x, _ = q.dequeue()
    with pytest.raises(tq.QueueError, match=r"Dequeue\{checked\}: DebugMode cannot check a queue's Ops"):
        theano.function([], x.sum(), mode="DebugMode")
    assert q.size() == 2
    assert float(theano.function([], x.sum())()) == 12.0


def test_pickling_a_function_that_dequeues_says_why_it_cannot():
    import pickle

    q = tq.Queue(XY, target="cpu", name="local")
    x, _ = q.dequeue()
    f = theano.function([], x.sum())
    with pytest.raises(TypeError, match="queue 'local' cannot be pickled .nor can a compiled function"):
        pickle.dumps(f)
    with pytest.raises(TypeError, match="queue 'local' cannot be pickled"):
        pickle.dumps(q)
    q.put(*xy(1))
    assert float(f()) == 12.0  # the failed pickle changed nothing


def test_the_gpu_ops_c_code_compiles_without_a_gpu(tmp_path):
    """The GPU Ops' C files (support and init code, with the headers they
    name) compile here too, so a change to them is checked on every machine."""
    import shutil
    import subprocess
    import sysconfig

    pytest.importorskip("pygpu")
    gpu = pytest.importorskip("theano_queue.graph.theano_gpu")
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    for op in (gpu.GpuDequeue(XY, "q", None), gpu.GpuEnqueue(XY, "q", None)):
        dirs = [sysconfig.get_paths()["include"], np.get_include()] + op.c_header_dirs()
        if not any(os.path.isfile(os.path.join(d, "cuda.h")) for d in dirs):
            pytest.skip("needs the CUDA toolkit's cuda.h")
        source = "\n".join(
            ["#include <Python.h>", "#include <numpy/arrayobject.h>"]
            + ['#include "%s"' % header for header in op.c_headers()]
            + [op.c_support_code(), "PyMODINIT_FUNC PyInit_check(void) {"]
            + op.c_init_code()
            + ["return NULL; }"]
        )
        path = tmp_path / (op.c_file + ".cpp")
        path.write_text(source)
        built = subprocess.run(
            ["g++", "-fsyntax-only", "-Werror", "-Wno-cpp", *("-I" + d for d in dirs), str(path)],
            capture_output=True,
            text=True,
        )
        assert built.returncode == 0, built.stderr[-3000:]


def test_dequeued_variables_broadcast_on_no_axis_like_theanos_own_inputs():
    """Theano's convention (T.tensor4, T.matrix, theano.shared): a dequeued variable can be swapped for one."""
    q = tq.Queue([("x", "float32", (50, 1, 28, 28)), ("y", "float32", (50, 1))], target="cpu")
    qx, qy = q.dequeue()
    assert qx.broadcastable == (False,) * 4 and qy.broadcastable == (False, False)
    cost = qx.mean() + qy.mean()
    v, w = T.tensor4("v"), T.matrix("w", dtype="float32")
    f = theano.function([v, w], cost, givens={qx: v, qy: w})
    shared = theano.shared(np.ones((50, 1), "float32"))
    g = theano.function([v], cost, givens={qx: v, qy: shared})
    images = np.full((50, 1, 28, 28), 2, "float32")
    assert f(images, np.zeros((50, 1), "float32")) == pytest.approx(2.0)
    assert g(images) == pytest.approx(3.0)
    assert q.size() == 0 and q.stats()["dequeued"] == 0, "a function given the variables takes no element"
    # The dequeued variable in a function of its own, and an in-graph enqueue of a plain tensor4.
    q.put(images, np.ones((50, 1), "float32"))
    assert theano.function([], cost)() == pytest.approx(3.0)
    out = tq.Queue([("x", "float32", (50, 1, 28, 28)), ("y", "float32", (50, 1))], target="cpu")
    theano.function([v, w], out.enqueue(v, w))(images, np.ones((50, 1), "float32"))
    assert out.size() == 1


def test_a_component_may_declare_broadcastable_axes():
    q = tq.Queue([("x", "float32", (50, 1, 28, 28)), ("y", "int32", (50,))], target="cpu", broadcastable={"x": (1,)})
    qx, _ = q.dequeue()
    assert qx.broadcastable == (False, True, False, False)
    # Broadcasts against a (50, 3, 28, 28) tensor without a dimshuffle.
    colour = T.tensor4("colour")
    f = theano.function([colour], (qx * colour).shape)
    q.put(np.ones((50, 1, 28, 28), "float32"), np.zeros(50, "int32"))
    assert list(f(np.ones((50, 3, 28, 28), "float32"))) == [50, 3, 28, 28]


def test_x_and_y_of_two_dequeues_warn_once_that_they_are_different_batches():
    q = tq.Queue(XY, capacity=4, target="cpu", name="pairs")
    (x, _), (_, y) = q.dequeue(), q.dequeue()
    with pytest.warns(
        tq.errors.SeveralDequeuesWarning, match=r"2 elements of queue 'pairs' per call.*x, y = q.dequeue\(\)"
    ):
        theano.function([], [x.sum(), y.sum()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per queue
        theano.function([], [x.mean(), y.mean()])
        x1, y1 = q.dequeue()
        theano.function([], [x1.sum(), y1.sum()])  # one dequeue: nothing to say


def test_a_call_after_the_epoch_ends_says_to_reopen_on_its_first_line_alone():
    q = tq.Queue(XY, target="cpu", name="epoch")
    x, _ = q.dequeue()
    f = theano.function([], x.sum())
    q.close()
    with pytest.raises(tq.QueueClosed) as caught:
        f()
    message = str(caught.value)
    assert message.splitlines() == [message], message  # no node dump after it
    assert message.startswith("Dequeue: queue 'epoch': closed and drained") and "q.reopen()" in message
    assert caught.value.__suppress_context__  # printed once, not again "during handling" of Theano's copy


def test_dequeued_variables_carry_their_static_shape_for_keras():
    q = tq.Queue(
        [("x", "float32", (4, 3, 2)), ("tokens", "int32", (4, tq.upto(9))), ("y", "int32", (4,))], target="cpu"
    )
    x, tokens, y, lengths = q.dequeue(lengths=True)
    assert [v._keras_shape for v in (x, tokens, y, lengths)] == [(None, 3, 2), (None, None), (None,), (None,)]


def test_a_second_thread_calling_a_function_while_it_waits_is_refused_and_nothing_is_lost():
    q = tq.Queue(XY, capacity=2, target="cpu")
    x, y = q.dequeue()
    f = theano.function([], [x * 2, y])
    taken = []
    waiting = threading.Thread(target=lambda: taken.append(f()))
    waiting.start()
    deadline = time.monotonic() + 10
    while q.stats()["consumer_wait_s"] == 0 and time.monotonic() < deadline:  # the thread's call waits
        time.sleep(0.01)
    time.sleep(0.1)
    with pytest.raises(tq.QueueError, match="called from a second thread while a call waits.*one thread at a time"):
        f()
    q.put(*xy(7))
    waiting.join(10)
    assert float(taken[0][0][0, 0]) == 14.0 and q.stats()["dequeued"] == 1


def test_a_function_called_from_another_thread_warns_once_what_is_safe():
    q = tq.Queue(XY, capacity=4, target="cpu")
    x, _ = q.dequeue()
    f = theano.function([], x.sum())
    for i in range(3):
        q.put(*xy(i))
    f()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            other = threading.Thread(target=f)
            other.start()
            other.join()
    assert [str(w.message) for w in caught if "second thread" in str(w.message)] == [SECOND_THREAD]
