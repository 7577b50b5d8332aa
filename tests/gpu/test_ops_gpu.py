"""The GPU half of tests/cpu/test_ops.py: GPU-dequeued variables take givens.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_ops_gpu.py``."""

import threading
import time
import warnings

import numpy as np
import pytest
import theano
import theano.tensor as T

import theano_queue as tq
from theano_queue.graph.theano import SECOND_THREAD

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


def test_a_second_thread_calling_a_gpu_function_while_it_waits_is_refused_and_nothing_is_lost():
    """GpuDequeue keeps the CPU Dequeue's guard (tests/cpu/test_ops.py): a refusal before anything is taken.

    The function is the dequeue alone (its GPU array out, no kernel after it): on the H200, libgpuarray 0.7.6
    finds no context for a kernel launched from a second thread (it enters a context once, whichever thread
    asks first), so a GpuElemwise there fails on its own; the dequeue holds the ring's context itself."""
    q = tq.Queue([("x", "float32", (8, 3))], capacity=2)
    assert q.on_gpu
    f = theano.function([], q.dequeue().transfer(None))
    taken = []
    waiting = threading.Thread(target=lambda: taken.append(f()))
    waiting.start()
    deadline = time.monotonic() + 10
    while q.stats()["consumer_wait_s"] == 0 and time.monotonic() < deadline:  # the thread's call waits
        time.sleep(0.01)
    time.sleep(0.1)
    with pytest.raises(tq.QueueError, match="GpuDequeue: this compiled function was called from a second thread"):
        f()
    q.put(np.full((8, 3), 7, "float32"))
    waiting.join(10)
    assert float(np.asarray(taken[0])[0, 0]) == 7.0 and q.stats()["dequeued"] == 1


def test_a_gpu_function_called_from_another_thread_warns_once_and_dequeues_there():
    q = tq.Queue([("x", "float32", (8, 3))], capacity=4)
    f = theano.function([], q.dequeue().transfer(None))
    for i in range(3):
        q.put(np.full((8, 3), i, "float32"))
    f()
    taken, failed = [], []

    def call():
        try:
            taken.append(float(np.asarray(f())[0, 0]))
        except Exception as exc:  # noqa: BLE001  (reported by the assertion below)
            failed.append(exc)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            other = threading.Thread(target=call)
            other.start()
            other.join()
    assert not failed and taken == [1.0, 2.0]
    assert [str(w.message) for w in caught if "second thread" in str(w.message)] == [SECOND_THREAD]
