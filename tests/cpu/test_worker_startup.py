"""Workers while they start (issue 27, item 1): under a deadline, and named when they miss it."""

import logging
import os
import signal
import time

import pytest
from timing import scaled
from worker_checks import wait_gone
from worker_datasets import SPEC, HangsWhenUnpickled, SlowToUnpickle, SpinsWhenUnpickledInWorker0, Tagged

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


def test_without_a_timeout_a_long_start_up_is_reported_then_fails_at_the_default_limit(monkeypatch, caplog):
    """The defaults, shortened: a warning every STARTUP_REPORT_S naming the worker and its phase, a failure at
    STARTUP_IDLE_S."""
    from theano_queue.feed import startup

    monkeypatch.setattr(startup, "STARTUP_REPORT_S", 0.3)
    monkeypatch.setattr(startup, "STARTUP_IDLE_S", 2.0)
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=30)
    with caplog.at_level(logging.WARNING, logger="theano_queue"):
        with tq.Feeder(q, HangsWhenUnpickled(64), workers=1) as feeder:
            exc, took = first_failure(q, 20)
            pid = feeder.stats()["pids"][0]
    reports = [r.getMessage() for r in caplog.records if "still starting" in r.getMessage()]
    assert reports, "no report while the worker started"
    assert all("worker 0 (pid %d) " % pid in r for r in reports), reports  # the first may still be importing
    assert "worker 0 (pid %d) unpickling the dataset" % pid in reports[-1], reports
    assert "did not start within the Feeder's start-up limit of 2 s" in str(exc)
    assert "unpickling the dataset" in str(exc)


def test_a_worker_that_spins_while_starting_fails_the_feeder_not_leaving_its_work_to_the_other():
    """Processor time is no progress past startup_timeout: the spinning worker fails the Feeder, named."""
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=30)
    got = 0
    with tq.Feeder(q, SpinsWhenUnpickledInWorker0(64), workers=2, epochs=None, startup_timeout=2) as feeder:
        with pytest.raises(tq.FeederError) as info:
            while got < 10**6:  # an endless run: only the failure ends it
                q.get(timeout=30)
                got += 1
        pids = feeder.stats()["pids"]
    message = str(info.value)
    assert "worker 0 (pid %d) did not start within the Feeder's startup_timeout=2 s" % pids[0] in message
    assert "unpickling the dataset" in message
    assert feeder.exception.worker == 0
    assert wait_gone(pids, 2) == []


class _Starting:
    """A starting worker as the watch sees it: this process (which uses processor time while the test runs)."""

    def __init__(self, wid, started_at):
        self.id, self.pid, self.alive, self.ready_at = wid, os.getpid(), True, None
        self.started_at = self.progress_at = started_at
        self.cpu_ticks = -1


def test_the_start_up_bound_holds_for_a_busy_worker_on_a_fake_clock(caplog):
    from theano_queue.feed import startup

    watch = startup.StartupWatch("Feeder(q)", None, 120.0, lambda w: "opening the dataset")
    w = _Starting(3, started_at=1000.0)
    with caplog.at_level(logging.WARNING, logger="theano_queue"):
        for now in range(1001, 1120):  # one check a second: busy all along (this process runs)
            assert watch.check([w], float(now)) is None
        failure = watch.check([w], 1121.0)
    assert failure is not None
    assert "worker 3 (pid %d) did not start within the Feeder's startup_timeout=120 s" % os.getpid() in str(failure)
    assert "while opening the dataset" in str(failure)
    reports = [r.getMessage() for r in caplog.records if "still starting" in r.getMessage()]
    assert len(reports) == 11 and all("worker 3" in r and "opening the dataset" in r for r in reports)


@pytest.mark.parametrize("bad", [0, -1, "10", True, None])
def test_startup_timeout_is_checked(bad):
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=30)
    with pytest.raises(ValueError, match="startup_timeout must be a number of seconds > 0"):
        tq.Feeder(q, Tagged(16), workers=1, startup_timeout=bad)
