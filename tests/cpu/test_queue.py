"""The queue on the host: FIFO, exactly-once, states, timeouts, bad input."""

import math
import threading
import time

import numpy as np
import pytest
from helpers import (
    TAGGED,
    check_tagged,
    holding_the_gil,
    put_waiting_for_room,
    tagged_element,
    two_producers_exactly_once,
)
from staging import staging_holds

import theano_queue as tq

XY = [("x", "float32", (4, 3)), ("y", "int32", (4,))]


def xy(value, rows=4):
    return np.full((rows, 3), value, "float32"), np.arange(rows, dtype="int32") + int(value)


def test_fifo_order_and_values():
    q = tq.Queue(XY, capacity=3, target="cpu")
    for i in range(3):
        assert q.put(*xy(i)) == i + 1
    for i in range(3):
        x, y = q.get()
        np.testing.assert_array_equal(x, xy(i)[0])
        np.testing.assert_array_equal(y, xy(i)[1])
    assert q.size() == 0


def test_put_forms_are_equivalent():
    q = tq.Queue(XY, capacity=3, target="cpu")
    x, y = xy(5)
    q.put(x, y)
    q.put((x, y))
    q.put({"y": y, "x": x})
    for _ in range(3):
        got = q.get()
        np.testing.assert_array_equal(got[0], x)
        np.testing.assert_array_equal(got[1], y)


def test_single_component_takes_bare_arrays():
    q = tq.Queue([("x", "int16", (2, 2))], target="cpu")
    q.put(np.ones((2, 2), "int16"))
    q.put((np.zeros((2, 2), "int16"),))
    assert q.get()[0].sum() == 4 and q.get()[0].sum() == 0


def test_partial_batches_keep_their_length():
    q = tq.Queue(XY, capacity=2, target="cpu")
    q.put(*xy(1, rows=1))
    q.put(*xy(2, rows=4))
    x, y = q.get()
    assert x.shape == (1, 3) and y.shape == (1,)
    assert q.get()[0].shape == (4, 3)


def test_scalar_components():
    q = tq.Queue([("step", "int64", ()), ("lr", "float64", ())], target="cpu")
    q.put(7, 0.5)
    step, lr = q.get()
    assert step.shape == () and step == 7 and lr == 0.5


def test_two_producers_exactly_once_fifo_10000():
    q = tq.Queue(TAGGED, capacity=4, target="cpu")
    two_producers_exactly_once(q, lambda: q.get(timeout=10), per_producer=5000)
    stats = q.stats()
    assert stats["enqueued"] == stats["dequeued"] == 10000
    assert stats["bytes_in"] == stats["bytes_out"] > 0 and stats["dropped"] == 0


def test_two_consumers_share_without_duplicates():
    q = tq.Queue(TAGGED, capacity=3, target="cpu")
    seen, lock = [], threading.Lock()

    def consume():
        while True:
            try:
                element = q.get(timeout=10)
            except tq.QueueClosed:
                return
            with lock:
                seen.append(check_tagged(*element))

    consumers = [threading.Thread(target=consume) for _ in range(2)]
    for t in consumers:
        t.start()
    rng = np.random.default_rng(0)
    for sequence in range(2000):
        q.put(*tagged_element(0, sequence, rng))
    q.close()
    for t in consumers:
        t.join()
    assert sorted(s for _, s in seen) == list(range(2000))


def test_close_drains_then_raises():
    q = tq.Queue(XY, capacity=3, target="cpu")
    q.put(*xy(1))
    q.put(*xy(2))
    q.close()
    assert q.closed
    with pytest.raises(tq.QueueClosed, match="closed"):
        q.put(*xy(3))
    assert q.get()[0][0, 0] == 1 and q.get()[0][0, 0] == 2
    with pytest.raises(tq.QueueClosed, match="closed and drained"):
        q.get()


def test_close_with_cancel_drops_pending():
    q = tq.Queue(XY, capacity=3, target="cpu")
    q.put(*xy(1))
    q.put(*xy(2))
    q.close(cancel_pending=True)
    assert q.size() == 0
    with pytest.raises(tq.QueueClosed):
        q.get(timeout=1)
    assert q.stats()["dropped"] == 2


def blocked(call):
    """Runs call in a thread that is blocked in it; returns (thread, outcome list)."""
    outcome = []

    def run():
        try:
            call()
            outcome.append("returned")
        except tq.QueueClosed as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=run, daemon=True)  # a test that fails leaves no thread behind
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive() and not outcome, "it did not block"
    return thread, outcome


def test_close_wakes_a_blocked_consumer_and_producer():
    q = tq.Queue(XY, capacity=1, target="cpu", name="woken")
    consumer, consumed = blocked(q.get)  # empty: the consumer waits for an element
    q.close()
    consumer.join(1)
    assert consumed == ["Queue.get: queue 'woken': closed and drained"]

    q.reopen()
    q.put(*xy(0))
    producer, produced = blocked(lambda: q.put(*xy(1)))  # full: the producer waits for a slot
    q.close()
    producer.join(1)
    assert produced == ["Queue.put: queue 'woken': closed"]
    assert q.get()[0][0, 0] == 0  # what was queued before the close is still there


def test_reopen_after_drain_for_the_next_epoch():
    q = tq.Queue(XY, capacity=2, target="cpu")
    for epoch in range(3):
        q.put(*xy(epoch))
        q.close()
        assert q.get()[0][0, 0] == epoch
        with pytest.raises(tq.QueueClosed):
            q.get()
        q.reopen()
        assert not q.closed


def test_reopen_refuses_while_elements_are_left():
    q = tq.Queue(XY, capacity=2, target="cpu")
    q.put(*xy(1))
    q.close()
    with pytest.raises(tq.QueueError, match="still holds 1 element"):
        q.reopen()
    q.close(cancel_pending=True)
    q.reopen()
    q.put(*xy(2))
    assert q.get()[0][0, 0] == 2


def test_get_timeout():
    q = tq.Queue(XY, target="cpu", timeout=0.2)
    start = time.monotonic()
    with pytest.raises(tq.QueueTimeout, match="no element within 0.2 s"):
        q.get()
    assert 0.15 < time.monotonic() - start < 2


def test_the_queues_timeout_bounds_every_wait_that_gives_none():
    q = tq.Queue(XY, capacity=1, target="cpu", timeout=0.1)
    with pytest.raises(tq.QueueTimeout, match="Queue.get: queue '.*': no element within 0.1 s"):
        q.get()
    q.put(*xy(1))
    with pytest.raises(tq.QueueTimeout, match="Queue.put: queue '.*': no free slot within 0.1 s"):
        q.put(*xy(2))
    with pytest.raises(tq.QueueTimeout, match="Queue.writer: queue '.*': no free slot within 0.1 s"):
        with q.writer():
            pass
    threading.Timer(0.3, q.get).start()
    start = time.monotonic()
    q.put(*xy(3), timeout=math.inf)  # no limit: waits for the get
    assert time.monotonic() - start >= 0.25
    q.timeout = None
    assert q.timeout is None


def test_each_class_of_engine_failure_is_one_kind_of_exception():
    from theano_queue import _engine

    with pytest.raises(MemoryError, match=r"Queue 'huge': out of host memory for 2 slots"):
        _engine.Ring("huge", [("x", "uint8", (1 << 47,))], 2)  # 128 TiB a slot
    with pytest.raises(ValueError, match=r"Queue 'none': expected a capacity of 1 to 4096, got 0"):
        _engine.Ring("none", [("x", "uint8", (1,))], 0)
    q = tq.Queue(XY, target="cpu", name="kept")
    q.put(*xy(1))
    q.close()
    with pytest.raises(tq.QueueError, match=r"Queue.reopen: queue 'kept': still holds 1 element"):
        q.reopen()
    with pytest.raises(tq.QueueClosed, match=r"Queue.put: queue 'kept': closed"):
        q.put(*xy(2))


def test_put_timeout_on_full_queue():
    q = tq.Queue(XY, capacity=1, target="cpu")
    q.put(*xy(1))
    with pytest.raises(tq.QueueTimeout, match="no free slot"):
        q.put(*xy(2), timeout=0.1)
    assert q.size() == 1 and q.get()[0][0, 0] == 1


def test_failure_reaches_consumer_after_the_elements_before_it():
    q = tq.Queue(XY, capacity=3, target="cpu")
    q.put(*xy(1))
    cause = ValueError("disk on fire")
    q.fail(cause)
    assert q.get()[0][0, 0] == 1
    with pytest.raises(tq.FeederError, match="disk on fire") as info:
        q.get()
    assert info.value.__cause__ is cause


BAD_INPUTS = [
    (
        "wrong dtype",
        lambda: (np.zeros((4, 3), "float64"), np.zeros(4, "int32")),
        TypeError,
        r"component 'x': expected dtype float32, got float64",
    ),
    (
        "too few components",
        lambda: (np.zeros((4, 3), "float32"),),
        ValueError,
        r"expected 2 components \(x, y\), got a bare array of shape \(4, 3\)",  # as a Feeder says it
    ),
    (
        "too many components",
        lambda: (np.zeros((4, 3), "float32"), np.zeros(4, "int32"), 1),
        ValueError,
        r"expected 2 components \(x, y\), got 3",
    ),
    (
        "wrong ndim",
        lambda: (np.zeros((4, 3, 1), "float32"), np.zeros(4, "int32")),
        ValueError,
        r"component 'x': expected 2 dimensions, shape \(<=4, 3\); got 3, shape \(4, 3, 1\)",
    ),
    (
        "wrong inner axis",
        lambda: (np.zeros((4, 2), "float32"), np.zeros(4, "int32")),
        ValueError,
        r"component 'x': expected shape \(<=4, 3\), got \(4, 2\)",
    ),
    (
        "leading axis too long",
        lambda: (np.zeros((4, 3), "float32"), np.zeros(5, "int32")),
        ValueError,
        r"component 'y': expected shape \(<=4,\), got \(5,\)",
    ),
    ("missing key", lambda: ({"x": np.zeros((4, 3), "float32")},), ValueError, r"missing 'y'"),
    (
        "unknown key",
        lambda: ({"x": np.zeros((4, 3), "float32"), "y": np.zeros(4, "int32"), "z": 1},),
        ValueError,
        r"unknown 'z'",
    ),
]


@pytest.mark.parametrize("label, element, error, message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_refused_and_queue_stays_intact(label, element, error, message):
    q = tq.Queue(XY, capacity=2, target="cpu", name="intact")
    q.put(*xy(1))
    with pytest.raises(error, match=message) as info:
        q.put(*element())
    assert "intact" in str(info.value)
    assert q.size() == 1 and q.stats()["enqueued"] == 1
    q.put(*xy(2))
    assert [q.get()[0][0, 0] for _ in range(2)] == [1, 2]


@pytest.mark.parametrize("given", ["int16", "uint8", ">i4", "bool"])
def test_arrays_that_cast_safely_are_converted(given):
    q = tq.Queue([("n", "int32", (3,))], target="cpu")
    q.put(np.array([1, 0, 1], dtype=given))
    got = q.get()[0]
    assert got.dtype == np.int32 and list(got) == [1, 0, 1]


@pytest.mark.parametrize("given", ["float64", "int64", "uint32", "float16"])
def test_arrays_that_do_not_cast_safely_are_refused(given):
    q = tq.Queue([("n", "int32", (3,))], target="cpu", name="strict")
    with pytest.raises(
        TypeError,
        match=r"Queue 'strict', component 'n': expected dtype int32, got %s, "
        r"which does not cast safely" % np.dtype(given),
    ):
        q.put(np.zeros(3, dtype=given))
    assert q.size() == 0


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="capacity"):
        tq.Queue(XY, capacity=0, target="cpu")
    with pytest.raises(ValueError, match="declared twice"):
        tq.Queue([("x", "float32", (2,)), ("x", "float32", (2,))], target="cpu")
    with pytest.raises(TypeError, match="not a dtype"):
        tq.Queue([("x", "notatype", (2,))], target="cpu")
    with pytest.raises(ValueError, match="leading axis >= 1"):
        tq.Queue([("x", "float32", (0, 2))], target="cpu")
    with pytest.raises(ValueError, match="neither 'cpu' nor a Theano GPU context"):
        tq.Queue(XY, target="dev7")


def test_non_contiguous_input_is_copied_correctly():
    q = tq.Queue([("x", "float32", (4, 3))], target="cpu")
    base = np.arange(24, dtype="float32").reshape(4, 6)
    q.put(base[:, ::2])
    np.testing.assert_array_equal(q.get()[0], base[:, ::2])


def test_a_put_waiting_for_room_completes_while_the_consumer_holds_the_gil():
    # A feeder woken by a step's dequeue writes its element at once, without
    # first waiting for the training thread to let go of the GIL.
    q = tq.Queue([("x", "float32", (4, 4))], capacity=2, target="cpu")
    waiting = put_waiting_for_room(q, [np.zeros((4, 4), "float32")] * 2, np.ones((4, 4), "float32"))

    def take_then_hold():
        q.get()
        return holding_the_gil(0.3, q.size)

    assert take_then_hold() == 2
    waiting.join(10)
    assert [float(q.get()[0][0, 0]) for _ in range(2)] == [0.0, 1.0]


def test_stats_count_waits():
    q = tq.Queue(XY, capacity=1, target="cpu")
    threading.Timer(0.2, lambda: q.put(*xy(1))).start()
    q.get(timeout=5)
    stats = q.stats()
    assert stats["consumer_wait_s"] >= 0.1
    assert set(stats) == {
        "enqueued",
        "dequeued",
        "dropped",
        "lent",
        "bytes_in",
        "bytes_out",
        "producer_wait_s",
        "consumer_wait_s",
        "size",
        "capacity",
        "slots",
        "state",
        "backend",
        "fill_integral",
        "clock_s",
    }


def test_writer_fills_a_slot_in_place():
    q = tq.Queue(XY, capacity=2, target="cpu")
    with q.writer() as slot:
        slot["x"][:] = 3.5
        slot["y"][:2] = [7, 8]
        slot.rows = 2
        # Before the put: the views are the slot's staging itself, not a buffer copied in afterwards.
        assert staging_holds(q._ring, 0, slot["x"]) and staging_holds(q._ring, 1, slot["y"])
    x, y = q.get()
    assert x.shape == (2, 3) and (x == 3.5).all() and list(y) == [7, 8]
    assert not slot["x"].flags.writeable, "views are sealed once the element is put"


def test_writer_that_raises_puts_nothing():
    q = tq.Queue(XY, capacity=1, target="cpu")
    with pytest.raises(RuntimeError):
        with q.writer() as slot:
            slot["x"][:] = 1
            raise RuntimeError("loader broke")
    assert q.size() == 0 and q.stats()["dropped"] == 0  # abandoned, not lost: it was never put
    q.put(*xy(5))  # the slot came back
    assert q.get()[0][0, 0] == 5


def test_register_host_needs_a_gpu_queue():
    q = tq.Queue(XY, target="cpu")
    with pytest.raises(tq.QueueError, match="lives in host memory"):
        q.register_host(np.zeros(10, "float32"))


def test_large_elements_split_over_copy_threads_arrive_exact():
    from theano_queue import _engine

    before = _engine.copy_threads()
    _engine.set_copy_threads(3)
    try:
        q = tq.Queue([("x", "uint8", (9 << 20,)), ("y", "float64", (tq.own(700_001),))], capacity=2, target="cpu")
        rng = np.random.default_rng(0)
        for rows in (9 << 20, (9 << 20) - 12345):
            x = rng.integers(0, 256, rows + 1, dtype=np.uint8)[1:]  # an unaligned source
            y = rng.standard_normal(700_001)
            q.put(x, y)
            got_x, got_y = q.get()
            assert np.array_equal(got_x, x) and np.array_equal(got_y, y)
    finally:
        _engine.set_copy_threads(before)
    with pytest.raises(ValueError, match="expected 1 to 256 threads"):
        _engine.set_copy_threads(0)


def cuda_driver_present():
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(cuda_driver_present(), reason="a CUDA driver is here: the test needs a machine without one")
def test_a_gpu_ring_without_a_driver_says_why():
    from theano_queue import _engine

    with pytest.raises(tq.CudaError, match=r"Queue 'q': the CUDA driver \(libcuda\.so\.1\) could not be loaded"):
        _engine.Ring("q", [("x", "float32", (2,))], 2, None, gpu_context=1)


@pytest.mark.parametrize(
    "values, message",
    [
        ([2**40] * 4, "values that fit dtype int32; these int64 values do not"),
        ([1.7] * 4, "values that fit dtype int32; these float64 values do not"),
        ([1.0] * 4, "values that fit dtype int32"),
        (["a"] * 4, "numbers of dtype int32, got <U1 values"),
    ],
)
def test_python_values_are_cast_safely_or_refused(values, message):
    q = tq.Queue([("y", "int32", (4,))], target="cpu", name="casts")
    with pytest.raises(TypeError, match="Queue 'casts', component 'y': expected " + message):
        q.put(values)
    assert q.size() == 0
    q.put([1, 2, -3, 2**31 - 1])
    assert q.get()[0].tolist() == [1, 2, -3, 2**31 - 1]


def test_python_floats_go_into_float_components():
    q = tq.Queue(XY, target="cpu", name="floats")
    q.put([[0.5, 1, 2]] * 4, [0, 1, 2, 3])
    x, y = q.get()
    assert x.dtype == np.float32 and x[0].tolist() == [0.5, 1, 2]
    assert y.dtype == np.int32 and y.tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="component 'x': expected values that fit dtype float32"):
        q.put([[1e300, 0, 0]] * 4, [0, 1, 2, 3])


def test_one_component_queue_refuses_two_arrays():
    q = tq.Queue([("x", "float32", (4, 3))], capacity=3, target="cpu", name="one")
    a = np.zeros((2, 3), "float32")
    with pytest.raises(ValueError, match=r"Queue 'one': expected 1 component \(x\), got 2"):
        q.put(a, a)
    with pytest.raises(ValueError, match="expected 1 component"):
        q.put((a, a))
    assert q.size() == 0
    q.put(a)
    q.put((a,))
    q.put([[1, 2, 3]])  # a list is a batch of rows
    assert [q.get()[0].shape for _ in range(3)] == [(2, 3), (2, 3), (1, 3)]


def test_deleting_the_queue_wakes_a_thread_blocked_on_it():
    import gc

    import theano

    q = tq.Queue(XY, target="cpu", name="dropped")
    x, _ = q.dequeue()
    f = theano.function([], x.sum())
    consumer, outcome = blocked(f)
    del q
    gc.collect()
    consumer.join(5)
    assert not consumer.is_alive(), "the consumer is still blocked on a queue nobody can feed"
    assert outcome and "queue 'dropped': closed" in outcome[0]


def test_commit_and_abort_take_only_a_slot_reserved_for_writing():
    q = tq.Queue(XY, capacity=2, target="cpu", name="slots")
    q.put(*xy(1))
    ready = 0  # the slot of the element just put: readers may take it
    with pytest.raises(ValueError, match="Queue.writer: queue 'slots': slot 0 is not reserved for writing"):
        q._ring.abort(ready)
    with pytest.raises(ValueError, match="not reserved for writing"):
        q._ring.commit(ready, [4, 4])
    with pytest.raises(ValueError, match="slot 7 is not reserved"):
        q._ring.abort(7)
    assert q.size() == 1 and q.get()[0][0, 0] == 1
