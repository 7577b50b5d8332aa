"""``Feeder(workers="auto")`` (issue 44, item 1): the rule on synthetic measures and a fake clock, then runs
that grow and shrink the workers with every batch the sampler's, once, and state_dict() exact across a change."""

import time

import numpy as np
import pytest
from helpers import drain
from worker_datasets import SPEC, Tagged, expected_batch

import theano_queue as tq
from theano_queue.feed import autoworkers
from theano_queue.feed.autotune import AutoLog
from theano_queue.feed.autoworkers import WorkerRule, WorkerTuner, worker_limit
from theano_queue.sampler import Sampler

ROWS = 8


def test_the_rule_adds_the_workers_that_would_feed_the_model_at_most_doubling():
    rule = WorkerRule()
    # fed 1 - w of what it asks: count / (1 - w) workers would feed it
    assert rule.decide(0.40, 0.97, 3, 16) == (5, "model waited 40 %, workers busy 97 %")
    assert rule.decide(0.06, 0.97, 8, 16)[0] == 9  # a little short: one more
    assert rule.decide(0.75, 0.97, 2, 16)[0] == 4  # far short: at most twice as many in one period
    assert rule.decide(0.90, 0.97, 1, 16)[0] == 2
    assert rule.decide(0.40, 0.97, 6, 8)[0] == 8  # the limit
    count, reason = rule.decide(0.40, 0.97, 8, 8, " (the cores)")
    assert count == 8 and "at the limit of 8 worker(s) (the cores)" in reason


def test_a_run_starts_with_two_workers_unless_the_limit_is_lower():
    assert WorkerTuner(AutoLog(), cores=16).start_count() == 2
    assert WorkerTuner(AutoLog(), cores=1).start_count() == 1
    assert WorkerTuner(AutoLog(), max_workers=1, cores=16).start_count() == 1


def test_the_rule_keeps_the_count_unless_both_measures_say_so():
    rule = WorkerRule()
    assert rule.decide(0.40, 0.50, 3, 8)[0] == 3  # the model waits, but not for the workers
    assert rule.decide(0.04, 0.97, 3, 8)[0] == 3  # busy workers that keep the model fed
    assert rule.decide(0.00, 0.30, 3, 8) == (2, "model waited 0 %, workers busy 30 %")  # idle: one fewer
    assert rule.decide(0.00, 0.30, 1, 8)[0] == 1  # never below one


def test_the_limit_is_the_least_of_the_cores_max_workers_and_the_memory_budget():
    assert worker_limit(16, None, None, 0) == (16, " (the cores)")
    assert worker_limit(16, 4, None, 300 << 20) == (4, " (max_workers)")
    assert worker_limit(16, None, 1 << 30, 300 << 20) == (3, " (memory_budget over 300 MiB a worker)")
    assert worker_limit(16, None, 100 << 20, 300 << 20)[0] == 1


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_the_tuner_decides_once_a_period_from_the_counters_and_records_why():
    clock = FakeClock()
    log = AutoLog(clock)
    tuner = WorkerTuner(log, max_workers=6, cores=16)
    assert tuner.start_count() == 2 and log.current("workers") == 2
    rss = lambda: 100 << 20  # noqa: E731
    assert tuner.tick(0.0, 0.0, 0.0, 2, True, rss) is None  # starting: the baseline, nothing measured yet
    assert tuner.tick(0.5, 0.2, 0.9, 2, False, rss) is None  # not a period yet
    clock.t = 101.0
    assert tuner.tick(1.0, 0.5, 1.94, 2, False, rss) == 4  # in 1 s: waited 0.5 s, busy 1.94 s of 2 workers
    assert log.current("workers") == 4
    assert log.as_dict()["last_change"] == "+2 workers: model waited 50 %, workers busy 97 %"
    assert tuner.tick(2.0, 1.5, 3.94, 4, True, rss) is None  # the new workers start: the period begins again
    assert tuner.tick(3.0, 1.7, 7.84, 4, False, rss) == 5  # waited 20 %: 4 / 0.8
    assert tuner.tick(4.0, 2.0, 12.7, 5, False, rss) == 6  # waited 30 %: 5 / 0.7 > 6, max_workers
    assert tuner.tick(5.0, 2.5, 18.5, 6, False, rss) is None  # at max_workers
    assert tuner.tick(6.0, 2.5, 19.0, 6, False, rss) == 5  # the model is fed, the workers idle
    assert [c.new for c in log.changes] == [4, 5, 6, 5]
    assert log.changes[-1].reason == "model waited 0 %, workers busy 8 %"


def test_the_memory_budget_bounds_the_tuner_by_a_workers_resident_memory():
    tuner = WorkerTuner(AutoLog(), memory_budget=250 << 20, cores=16)
    tuner.tick(0.0, 0.0, 0.0, 2, False, lambda: 0)
    assert tuner.tick(1.0, 0.9, 2.0, 2, False, lambda: 100 << 20) is None  # 2 workers of 100 MiB: the budget
    assert tuner.log.changes == []
    assert tuner.limit(100 << 20)[0] == 2


def expected_batches(n, **sampler):
    s = Sampler(n, ROWS, **sampler)
    return [expected_batch(s.batch(p)) for p in range(s.total)]


def same(got, want):
    return len(got) == len(want) and all(
        np.array_equal(g[0], w[0]) and np.array_equal(g[1], w[1]) for g, w in zip(got, want)
    )


def test_workers_grow_while_the_model_waits_and_every_batch_comes_once_and_resumes_exactly(monkeypatch):
    monkeypatch.setattr(autoworkers, "PERIOD_S", 0.3)
    monkeypatch.setattr(autoworkers, "START_WORKERS", 1)  # room to grow on a two-core machine
    n = 1200  # 150 batches of samples that take 10 ms each: 12 s for one worker
    want = expected_batches(n, shuffle=True, seed=4)
    q = tq.Queue(SPEC, capacity=3, target="cpu", timeout=60)
    got = []
    with tq.Feeder(q, Tagged(n, slow="all", slow_s=0.01), workers="auto", shuffle=True, seed=4) as feeder:
        while len(got) < len(want) - 10 and not feeder.stats()["auto"]["history"]:
            got.append(q.get())
        got.extend(q.get() for _ in range(5))  # taken by the consumer after the change
        state = feeder.state_dict()
        stats = feeder.stats()
    history = stats["auto"]["history"]
    assert history, "no worker was added while the model waited (%d batches taken)" % len(got)
    assert history[0][1:4] == ("workers", 1, 2) and "model waited" in history[0][4]
    assert stats["auto"]["workers"] == stats["workers"] == 2
    q.reopen()
    with tq.Feeder(q, Tagged(n), workers=2, shuffle=True, seed=4, state=state):
        rest = drain(q)
    assert same(got + rest, want)


def test_idle_workers_retire_after_their_work_and_no_batch_is_lost_or_doubled(monkeypatch):
    monkeypatch.setattr(autoworkers, "PERIOD_S", 0.3)
    monkeypatch.setattr(autoworkers, "START_WORKERS", 2)
    n = 800  # 100 batches taken by a slow model: the two workers idle
    want = expected_batches(n)
    q = tq.Queue(SPEC, capacity=2, target="cpu", timeout=60)
    got = []
    with tq.Feeder(q, Tagged(n), workers="auto", max_workers=2) as feeder:
        for element in iter(lambda: _get_or_none(q), None):
            got.append(element)
            time.sleep(0.05)
        stats = feeder.stats()
    history = stats["auto"]["history"]
    assert history and history[0][1:4] == ("workers", 2, 1), history
    assert same(got, want)
    assert feeder.exception is None


def _get_or_none(q):
    try:
        return q.get()
    except tq.QueueClosed:
        return None


@pytest.mark.parametrize(
    "dataset, args, message",
    [
        ([(np.zeros((ROWS, 5, 3), "float32"), np.zeros(ROWS, "int64"))], {}, "an iterable's streams"),
        (Tagged(16), {"max_workers": 0}, "max_workers must be an int >= 1"),
        (Tagged(16), {"memory_budget": -5}, "memory_budget must be a number of bytes"),
    ],
)
def test_auto_workers_refusals_name_the_fix(dataset, args, message):
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with pytest.raises(ValueError, match=message):
        tq.Feeder(q, dataset, workers="auto", **args)


def test_max_workers_without_auto_is_refused():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with pytest.raises(ValueError, match="bound workers='auto'"):
        tq.Feeder(q, Tagged(16), workers=2, max_workers=4)


def test_on_sixteen_cores_the_tuner_reaches_the_count_that_feeds_the_model_without_overshooting():
    """A plant with a fake clock: the model asks 8000 samples/s, a worker makes 930 (8.6 workers' worth).  Each
    period the tuner sees what that count would give; it must settle at 9 within a few periods, never above."""
    demand, per_worker = 8000.0, 930.0
    tuner = WorkerTuner(AutoLog(), cores=16)
    count = tuner.start_count()
    waited = busy = 0.0
    tuner.tick(0.0, waited, busy, count, False, lambda: 50 << 20)
    counts = [count]
    for period in range(1, 11):
        rate = min(demand, count * per_worker)
        waited += 1.0 - rate / demand  # the share of the second the model waited for input
        busy += rate / per_worker  # worker-seconds spent on samples
        new = tuner.tick(float(period), waited, busy, count, False, lambda: 50 << 20)
        if new is not None:
            count = new
        counts.append(count)
    assert counts[:5] == [2, 4, 8, 9, 9], counts
    assert set(counts[4:]) == {9}
