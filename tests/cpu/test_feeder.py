"""Feeder: the background producer, its end, its errors and its stop."""

import time
import traceback

import numpy as np
import pytest
import theano
from helpers import stop_wakes_a_feeder_waiting_for_space
from staging import staging_holds

import theano_queue as tq

XY = [("x", "float32", (4, 3)), ("y", "int32", (4,))]


def batches(n, rows=4):
    for i in range(n):
        yield np.full((rows, 3), i, "float32"), np.full(rows, i, "int32")


def drain(f):
    seen = []
    while True:
        try:
            seen.append(f())
        except tq.QueueClosed:
            return seen


def test_feeder_fills_and_closes_for_a_training_loop():
    q = tq.Queue(XY, capacity=2, target="cpu")
    x, y = q.dequeue()
    f = theano.function([], [x[0, 0], y.sum()])
    with tq.Feeder(q, batches(50)) as feeder:
        seen = drain(f)
    assert [float(a) for a, _ in seen] == list(range(50))
    assert feeder.produced == 50 and not feeder.running


def test_feeder_takes_dicts():
    q = tq.Queue(XY, capacity=2, target="cpu")
    source = ({"y": y, "x": x} for x, y in batches(5))
    with tq.Feeder(q, source):
        got = [q.get()[0][0, 0] for _ in range(5)]
    assert got == [0, 1, 2, 3, 4]


def test_one_function_serves_every_epoch():
    q = tq.Queue(XY, capacity=2, target="cpu")
    f = theano.function([], q.dequeue()[0][0, 0])
    for epoch in range(3):
        with tq.Feeder(q, batches(7)):
            assert len(drain(f)) == 7
        q.reopen()


def failing_source():
    yield from batches(3)
    raise ValueError("bad record 3")


def test_source_error_reaches_the_consumer_as_feeder_error_with_cause():
    q = tq.Queue(XY, capacity=4, target="cpu")
    f = theano.function([], q.dequeue()[0][0, 0])
    with tq.Feeder(q, failing_source()) as feeder:
        got = [float(f()) for _ in range(3)]  # everything before the failure arrives
        with pytest.raises(tq.FeederError, match="ValueError: bad record 3") as info:
            f()
    assert got == [0, 1, 2]
    cause = info.value.__cause__
    assert isinstance(cause, ValueError) and feeder.exception is cause
    frames = traceback.extract_tb(cause.__traceback__)
    assert any(frame.name == "failing_source" for frame in frames), "the source's traceback is kept"


def test_bad_element_from_the_source_fails_the_queue_with_a_clear_cause():
    q = tq.Queue(XY, capacity=4, target="cpu")
    source = [(np.zeros((4, 3), "float64"), np.zeros(4, "int32"))]
    with tq.Feeder(q, source):
        with pytest.raises(tq.FeederError) as info:
            q.get(timeout=5)
    assert isinstance(info.value.__cause__, TypeError)
    assert "component 'x': expected dtype float32, got float64" in str(info.value.__cause__)


def test_leaving_the_loop_by_an_exception_stops_the_feeder():
    q = tq.Queue(XY, capacity=1, target="cpu")
    endless = ((np.zeros((4, 3), "float32"), np.zeros(4, "int32")) for _ in iter(int, 1))
    feeder = tq.Feeder(q, endless)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="training blew up"):
        with feeder:
            q.get(timeout=5)
            raise RuntimeError("training blew up")
    assert not feeder.running
    assert time.monotonic() - start < 2
    assert q.closed


def test_stop_wakes_a_feeder_blocked_on_a_full_queue():
    q = tq.Queue(XY, capacity=1, target="cpu")
    feeder = tq.Feeder(q, batches(100)).start()
    time.sleep(0.2)  # the queue is full; the feeder waits for space
    feeder.stop()
    assert feeder.join(timeout=1)
    assert feeder.produced == 1


def test_stop_wakes_the_feeder_at_once():
    q = tq.Queue(XY, capacity=1, target="cpu")
    assert stop_wakes_a_feeder_waiting_for_space(q, tq.Feeder(q, batches(100))), "woken, not polled"


def test_the_queues_timeout_does_not_bound_the_feeders_wait_for_space():
    q = tq.Queue(XY, capacity=1, target="cpu", timeout=0.05)
    with tq.Feeder(q, batches(4)) as feeder:
        got = []
        for _ in range(4):
            time.sleep(0.2)  # a slow consumer: the feeder waits longer than the queue's timeout
            got.append(float(q.get(timeout=5)[0][0, 0]))
    assert got == [0, 1, 2, 3] and feeder.exception is None


def test_consumer_closing_the_queue_ends_the_feeder_quietly():
    q = tq.Queue(XY, capacity=1, target="cpu")
    feeder = tq.Feeder(q, batches(100), close_when_done=False).start()
    q.get(timeout=5)
    q.close(cancel_pending=True)
    assert feeder.join(timeout=2)
    assert feeder.exception is None


def test_two_feeders_into_one_queue():
    q = tq.Queue(XY, capacity=2, target="cpu")
    feeders = [tq.Feeder(q, batches(100), close_when_done=False).start() for _ in range(2)]
    got = [q.get(timeout=5)[0][0, 0] for _ in range(200)]
    for feeder in feeders:
        assert feeder.join(timeout=5)
    assert sorted(got) == sorted(list(range(100)) * 2)


def test_a_feeder_runs_once():
    q = tq.Queue(XY, target="cpu")
    feeder = tq.Feeder(q, []).start()
    feeder.join(5)
    with pytest.raises(RuntimeError, match="already started"):
        feeder.start()


def test_feeder_with_a_fill_function_writes_in_place():
    q = tq.Queue(XY, capacity=2, target="cpu")
    counter = iter(range(6))
    in_place = []

    def fill(x, y):
        i = next(counter)  # StopIteration ends the feeder
        x[:] = i + 0.5
        y[:] = i
        # The arrays handed to fill are the slot's staging itself, not buffers copied in afterwards.
        in_place.append(staging_holds(q._ring, 0, x) and staging_holds(q._ring, 1, y))
        return 4 if i % 2 == 0 else 2

    f = theano.function([], q.dequeue())
    with tq.Feeder(q, fill=fill):
        seen = drain(f)
    assert [(float(x[0, 0]), x.shape[0]) for x, _ in seen] == [(i + 0.5, 4 if i % 2 == 0 else 2) for i in range(6)]
    assert in_place == [True] * 6


def test_feeder_needs_a_source_or_a_fill_function():
    q = tq.Queue(XY, target="cpu")
    with pytest.raises(TypeError, match="either a source iterable or a fill function"):
        tq.Feeder(q)


def test_queue_closed_raised_by_the_source_reaches_the_consumer():
    upstream = tq.Queue(XY, target="cpu", name="upstream")
    upstream.put(np.zeros((4, 3), "float32"), np.zeros(4, "int32"))
    upstream.close()

    def from_upstream():
        while True:
            yield upstream.get(timeout=5)  # raises QueueClosed after the one element

    q = tq.Queue(XY, target="cpu", name="downstream", timeout=10)
    with tq.Feeder(q, from_upstream()):
        assert q.get()[1].tolist() == [0, 0, 0, 0]
        with pytest.raises(tq.FeederError) as info:
            q.get()
    assert isinstance(info.value.__cause__, tq.QueueClosed)
    assert "upstream" in str(info.value.__cause__)


def test_a_feeder_on_a_closed_queue_says_to_reopen():
    q = tq.Queue(XY, target="cpu", name="ended")
    with tq.Feeder(q, batches(2)):
        assert len([q.get(timeout=5) for _ in range(2)]) == 2
    assert q.closed
    with pytest.raises(tq.QueueClosed, match=r"queue 'ended' is closed .* q.reopen\(\)"):
        with tq.Feeder(q, batches(2)):
            pass
    q.reopen()
    with tq.Feeder(q, batches(2)):
        assert len([q.get(timeout=5) for _ in range(2)]) == 2
