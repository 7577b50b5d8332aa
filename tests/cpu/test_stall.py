"""A silent stall says so (issue 19, item 6): a dequeue that has waited set_stall_warning's time logs one
warning on the "theano_queue" logger naming the queue, the producers attached and what the ring holds."""

import logging
import threading
import time
from types import SimpleNamespace

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
    from theano_queue.tools.stall import DEFAULT_STALL_WARNING_S

    assert DEFAULT_STALL_WARNING_S == 30.0
    assert stall_after(None) == 30.0  # the fixture set it; the package sets the same default at import


def test_a_long_dequeue_warns_once_naming_queue_producers_and_ring(stall_after, caplog, monkeypatch):
    stall_after(0.1)
    q = tq.Queue(SPEC, capacity=3, target="cpu", name="starved")
    q.put(np.zeros(2, "float32"))
    q.get()
    attached = [SimpleNamespace(name="Feeder(starved)", activity=lambda: "its workers start")] * 2
    monkeypatch.setattr(q.port.run, "attached", lambda: attached)
    with caplog.at_level(logging.WARNING, logger="theano_queue"), pytest.raises(tq.QueueTimeout):
        q.get(timeout=1.0)  # ten times the threshold: still one warning for the one wait
    (record,) = stall_records(caplog)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "'starved'" in message and "2 producers attached; Feeder(starved): its workers start" in message
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


def test_a_blocked_put_warns_like_a_dequeue_and_disabled_warnings_stay_silent(stall_after, caplog):
    stall_after(0.05)
    q = tq.Queue(SPEC, capacity=1, target="cpu", name="full")
    q.put(np.zeros(2, "float32"))
    with caplog.at_level(logging.WARNING, logger="theano_queue"):
        with pytest.raises(tq.QueueTimeout):
            q.put(np.zeros(2, "float32"), timeout=0.4)  # a full ring: nobody takes
        (record,) = stall_records(caplog)
        message = record.getMessage()
        assert "Queue 'full': a put has waited" in message and "for a free slot" in message
        assert "holds 1 of 1 element(s)" in message and "Take elements" in message
        caplog.clear()
        q.get()
        stall_after(None)
        with pytest.raises(tq.QueueTimeout):
            q.get(timeout=0.4)
    assert not stall_records(caplog)


def test_a_feeder_waiting_for_the_model_does_not_warn(stall_after, caplog):
    stall_after(0.05)
    q = tq.Queue(SPEC, capacity=1, target="cpu")
    with caplog.at_level(logging.WARNING, logger="theano_queue"):
        with tq.Feeder(q, [np.zeros(2, "float32")] * 3) as feeder:
            time.sleep(0.4)  # its second put waits for a slot: that is backpressure, not a stall
            assert feeder.running
    assert not stall_records(caplog)


def test_the_warning_says_what_each_feeder_does_and_advises_nothing_unfitting(stall_after, caplog):
    from worker_datasets import SPEC as WORKER_SPEC
    from worker_datasets import HangsWhenUnpickled

    stall_after(0.3)
    q = tq.Queue(WORKER_SPEC, capacity=2, target="cpu", name="starting")
    with tq.Feeder(q, HangsWhenUnpickled(64), workers=2, name="slow start"):
        with caplog.at_level(logging.WARNING, logger="theano_queue"), pytest.raises(tq.QueueTimeout):
            q.get(timeout=1.0)
    (record,) = stall_records(caplog)
    message = record.getMessage()
    assert "1 producer attached; slow start: workers starting, 0 of 2 ready" in message
    assert "Start a Feeder" not in message


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
