"""Workers while they start (issue 27, item 1): under a deadline, and named when they miss it."""

import os
import signal
import time

import pytest
from timing import scaled
from worker_checks import wait_gone
from worker_datasets import SPEC, HangsWhenUnpickled, SlowToUnpickle, Tagged

import theano_queue as tq


def first_failure(q, limit_s):
    """The FeederError a consumer gets, and the seconds it took; fails the test past limit_s."""
    started = time.monotonic()
    with pytest.raises(tq.FeederError) as info:
        q.get(timeout=limit_s)
    return info.value, time.monotonic() - started


def test_a_dataset_whose_unpickling_blocks_fails_within_the_timeout():
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=30)
    with tq.Feeder(q, HangsWhenUnpickled(64), workers=1, timeout=2) as feeder:
        exc, took = first_failure(q, 20)
        pid = feeder.stats()["pids"][0]
    message = str(exc)
    assert took < scaled(5.0), "the start-up hang took %.1f s to fail" % took
    assert "worker 0 (pid %d)" % pid in message and "timeout=2 s" in message
    assert "unpickling the dataset" in message and "no progress" in message
    assert feeder.exception.worker == 0 and str(feeder.exception) in message
    assert wait_gone([pid], 2) == []


def test_a_stopped_worker_fails_within_the_timeout_naming_its_state():
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=30)
    with tq.Feeder(q, Tagged(100_000, jitter=0.004), workers=2, timeout=2, epochs=None) as feeder:
        pids = feeder.stats()["pids"]
        while len(pids) < 2:
            time.sleep(0.005)
            pids = feeder.stats()["pids"]
        os.kill(pids[1], signal.SIGSTOP)  # while it still starts: spawn takes longer than this
        stopped = time.monotonic()
        try:
            with pytest.raises(tq.FeederError, match=r"worker 1 \(pid %d\) did not start" % pids[1]) as info:
                while True:  # worker 0 may deliver batches meanwhile: the Feeder fails all the same
                    q.get(timeout=20)
        finally:
            os.kill(pids[1], signal.SIGCONT)
    assert "stopped (SIGSTOP" in str(info.value)
    assert time.monotonic() - stopped < scaled(5.0)
    assert wait_gone(pids, 2) == []


def test_a_start_up_that_uses_the_processor_longer_than_the_timeout_is_not_a_hang():
    """A long import (here: 2.5 s of unpickling work) with timeout=1 is progress, not a hang."""
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=30)
    with tq.Feeder(q, SlowToUnpickle(16, 2.5), workers=1, timeout=1) as feeder:
        x, y = q.get(timeout=30)
    assert y.tolist() == list(range(8)) and feeder.exception is None


def test_a_worker_killed_while_starting_says_killed_by_which_signal():
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=30)
    with tq.Feeder(q, Tagged(64), workers=1) as feeder:
        pids = feeder.stats()["pids"]
        while not pids:
            time.sleep(0.005)
            pids = feeder.stats()["pids"]
        os.kill(pids[0], signal.SIGKILL)
        exc, _ = first_failure(q, 20)
    message = str(exc)
    assert "worker 0 (pid %d) was killed by SIGKILL while importing" % pids[0] in message
    assert "__main__" not in message, "a kill is not a missing guard"


def test_without_a_timeout_a_long_start_up_warns_then_fails_at_the_default_limit(monkeypatch, caplog):
    """The defaults, shortened: a warning once the start-up passes SLOW_SAMPLE_S, a failure at STARTUP_IDLE_S."""
    import logging

    from theano_queue.feed import watch

    monkeypatch.setattr(watch, "SLOW_SAMPLE_S", 0.5)
    monkeypatch.setattr(watch, "STARTUP_IDLE_S", 2.0)
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=30)
    with caplog.at_level(logging.WARNING, logger="theano_queue"):
        with tq.Feeder(q, HangsWhenUnpickled(64), workers=1):
            exc, took = first_failure(q, 20)
    warned = [r.getMessage() for r in caplog.records if "has been" in r.getMessage()]
    assert len(warned) == 1 and "worker 0" in warned[0] and "give Feeder(timeout=...)" in warned[0]
    assert "did not start within the Feeder's start-up limit of 2 s" in str(exc)
    assert "unpickling the dataset" in str(exc)
