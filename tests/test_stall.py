"""A silent stall says so (issue 19, item 6): a dequeue that has waited set_stall_warning's time logs one
warning on the "theano_queue" logger naming the queue, the producers attached and what the ring holds."""

import logging
import threading
import time

import numpy as np
import pytest

import theano_queue as tq

SPEC = [("x", "float32", (2,))]


@pytest.fixture
def stall_after():
    """Sets a short threshold for the test, and puts the previous one back."""
    previous = tq.set_stall_warning(30.0)
    yield tq.set_stall_warning
    tq.set_stall_warning(previous)


def stall_records(caplog):
    return [r for r in caplog.records if r.name == "theano_queue" and "has waited" in r.getMessage()]


def test_the_default_is_thirty_seconds(stall_after):
    from theano_queue.stall import DEFAULT_STALL_WARNING_S

    assert DEFAULT_STALL_WARNING_S == 30.0
    assert stall_after(None) == 30.0  # the fixture set it; the package sets the same default at import


def test_a_long_dequeue_warns_once_naming_queue_producers_and_ring(stall_after, caplog, monkeypatch):
    stall_after(0.1)
    q = tq.Queue(SPEC, capacity=3, target="cpu", name="starved")
    q.put(np.zeros(2, "float32"))
    q.get()
    monkeypatch.setattr(q, "_feeders", [object(), object()], raising=False)
    with caplog.at_level(logging.WARNING, logger="theano_queue"), pytest.raises(tq.QueueTimeout):
        q.get(timeout=1.0)  # ten times the threshold: still one warning for the one wait
    (record,) = stall_records(caplog)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "'starved'" in message and "2 producers attached" in message
    assert "holds 0 of 3 element(s)" in message and "open" in message and "1 put, 1 taken" in message


def test_a_queue_without_feeders_reports_none(stall_after, caplog):
    stall_after(0.1)
    q = tq.Queue(SPEC, capacity=2, target="cpu", name="alone")
    with caplog.at_level(logging.WARNING, logger="theano_queue"), pytest.raises(tq.QueueTimeout):
        q.get(timeout=0.5)
    (record,) = stall_records(caplog)
    assert "0 producers attached" in record.getMessage()


def test_an_element_in_time_is_no_stall(stall_after, caplog):
    stall_after(20.0)
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    threading.Timer(0.2, q.put, [np.ones(2, "float32")]).start()
    with caplog.at_level(logging.WARNING, logger="theano_queue"):
        (x,) = q.get(timeout=20.0)
    assert x.tolist() == [1, 1] and not stall_records(caplog)


def test_waiting_producers_and_disabled_warnings_stay_silent(stall_after, caplog):
    stall_after(0.05)
    q = tq.Queue(SPEC, capacity=1, target="cpu")
    q.put(np.zeros(2, "float32"))
    with caplog.at_level(logging.WARNING, logger="theano_queue"):
        with pytest.raises(tq.QueueTimeout):
            q.put(np.zeros(2, "float32"), timeout=0.4)  # a full ring: the producer waits, no dequeue stalls
        q.get()
        stall_after(None)
        with pytest.raises(tq.QueueTimeout):
            q.get(timeout=0.4)
    assert not stall_records(caplog)


def test_bad_thresholds_are_refused(stall_after):
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="set_stall_warning"):
            stall_after(bad)
    with pytest.raises(TypeError):
        stall_after("30")


def test_a_compiled_dequeue_warns_too(stall_after, caplog):
    import theano

    stall_after(0.1)
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=0.8, name="graph")
    f = theano.function([], q.dequeue() * 2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="theano_queue"), pytest.raises(tq.QueueTimeout):
        f()
    assert time.monotonic() - started >= 0.8
    (record,) = stall_records(caplog)
    assert "'graph'" in record.getMessage()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the hook's error, reported
def test_a_hook_that_raises_does_not_end_the_wait(stall_after):
    stall_after(0.05)
    q = tq.Queue(SPEC, capacity=2, target="cpu")

    def broken(waited):
        raise RuntimeError("broken hook")

    q._ring.on_stall = broken
    threading.Timer(0.4, q.put, [np.ones(2, "float32")]).start()
    (x,) = q.get(timeout=20.0)
    assert x.tolist() == [1, 1]
    with pytest.raises(TypeError, match="on_stall"):
        q._ring.on_stall = 3
