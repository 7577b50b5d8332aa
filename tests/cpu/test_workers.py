"""Feeder with map-style datasets and worker processes: data, order, sampling, resume, errors, shutdown."""

import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest
from helpers import stop_wakes_a_feeder_waiting_for_space
from worker_checks import assert_same, drain, expected, getter, wait_gone, wait_ready
from worker_datasets import ROWS, SPEC, Heavy, InPlace, Shards, Tagged, expected_batch

import theano_queue as tq
from theano_queue.sampler import Sampler

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")  # the helper modules


# ---- data and order ------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 1, 2, 4])
@pytest.mark.parametrize("shuffle", [False, True])
def test_bit_exact_in_batch_order(workers, shuffle):
    q = tq.Queue(SPEC, capacity=3, target="cpu")
    with tq.Feeder(q, Tagged(45, jitter=0.002), workers=workers, shuffle=shuffle, seed=7, epochs=2) as feeder:
        got = drain(getter(q))
    assert_same(got, expected(45, epochs=2, shuffle=shuffle, seed=7))
    assert got[5][0].shape[0] == 45 - 5 * ROWS, "the epoch's last batch is partial"
    assert feeder.produced == len(got) == 2 * feeder.batches_per_epoch
    assert q.stats()["dequeued"] == len(got)


def test_a_compiled_function_takes_the_batches():
    import theano

    q = tq.Queue(SPEC, capacity=2, target="cpu")
    x, y = q.dequeue()
    f = theano.function([], [x, y, x.sum()])
    with tq.Feeder(q, Tagged(30), workers=2, shuffle=True, drop_last=True):
        got = drain(f)
    assert_same([g[:2] for g in got], expected(30, shuffle=True, drop_last=True))
    assert len(got) == 3


def test_unordered_lets_a_finished_batch_go_first():
    slow_first = Tagged(32, slow={0}, slow_s=0.6)
    q = tq.Queue(SPEC, capacity=4, target="cpu")
    with tq.Feeder(q, slow_first, workers=2, ordered=False):
        got = drain(getter(q))
    first = [int(y[0]) // ROWS for _, y in got]
    assert sorted(first) == [0, 1, 2, 3] and first[0] != 0, first
    want = {i: b for i, b in enumerate(expected(32))}
    for element, batch in zip(got, first):
        assert_same([element], [want[batch]])

    q = tq.Queue(SPEC, capacity=4, target="cpu")
    with tq.Feeder(q, slow_first, workers=2):
        assert [int(y[0]) // ROWS for _, y in drain(getter(q))] == [0, 1, 2, 3]


def test_shards_of_two_ranks_are_disjoint_and_complete():
    seen = []
    for rank in range(2):
        q = tq.Queue(SPEC, capacity=2, target="cpu")
        with tq.Feeder(q, Tagged(21), workers=1 if rank else 0, shuffle=True, seed=3, shard=(rank, 2)):
            seen.append([int(i) for _, y in drain(getter(q)) for i in y])
    assert len(seen[0]) == len(seen[1]) == 11
    assert sorted(seen[0] + seen[1]) == sorted(list(range(21)) + [seen[0][0]]), "all 21, the first one twice"


def test_iterable_in_every_worker_split_with_worker_info():
    assert tq.worker_info() == (0, 1)
    q = tq.Queue(SPEC, capacity=3, target="cpu")
    with tq.Feeder(q, Shards(11), workers=3):
        got = drain(getter(q))
    # Workers take turns: worker b % 3 makes batch b, so the turns give batches 0, 1, 2, ...
    assert_same(got, [expected_batch(range(b * ROWS, b * ROWS + 1 + b % ROWS)) for b in range(11)])


def test_iterable_unordered():
    q = tq.Queue(SPEC, capacity=3, target="cpu")
    with tq.Feeder(q, Shards(11), workers=2, ordered=False):
        got = drain(getter(q))
    assert sorted(int(y[0]) // ROWS for _, y in got) == list(range(11))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_list_of_batches_over_epochs(workers):
    batches = [expected_batch(range(b, b + 1 + b % 3)) for b in range(5)]
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, batches, workers=workers, epochs=3):
        assert_same(drain(getter(q)), batches * 3)
    with pytest.raises(ValueError, match="runs once"):
        tq.Feeder(q, iter(batches), epochs=2)


def test_forkserver_and_fork():
    for method in ("forkserver", "fork"):
        q = tq.Queue(SPEC, capacity=2, target="cpu")
        with tq.Feeder(q, Tagged(20), workers=2, start_method=method) as feeder:
            assert_same(drain(getter(q)), expected(20))
        assert feeder.stats()["start_method"] == method


# ---- writing in place ----------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_read_into_writes_the_sample_in_place(workers):
    q = tq.Queue(InPlace.SPEC, capacity=3, target="cpu")
    ring = q._ring
    row_bytes = 5 * 3 * 4
    slots = {ring.slot_offset(s) + ring.component_offsets[0] for s in range(q.capacity)}
    with tq.Feeder(q, InPlace(20), workers=workers):
        got = drain(getter(q))
    want = expected(20)
    assert len(got) == len(want)
    for (x, where), (want_x, want_y) in zip(got, want):
        assert np.array_equal(x, want_x) and np.array_equal(where[:, 0], want_y)
        if workers:
            # Each row was a view of the shared staging, exactly where its slot's row lies.
            assert (where[:, 2] == 1).all()
            rows = np.arange(len(x))
            assert all(int(off) - r * row_bytes in slots for off, r in zip(where[:, 1], rows)), where
        else:
            assert (where[:, 2] == 2).all(), "a view of the slot the ring handed out"


# ---- resume ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "workers,ordered,stop_at",
    [
        (2, True, 5),
        (2, True, 8),
        (0, True, 3),
        (3, False, 7),
        (1, True, int(np.random.default_rng(11).integers(1, 12))),
    ],
)
def test_resume_gives_exactly_the_remaining_elements(workers, ordered, stop_at):
    import theano

    settings = dict(workers=workers, shuffle=True, seed=5, epochs=3, ordered=ordered)
    q = tq.Queue(SPEC, capacity=3, target="cpu")
    f = theano.function([], q.dequeue())
    with tq.Feeder(q, Tagged(29, jitter=0.001), **settings) as feeder:  # 4 batches an epoch
        first = [f() for _ in range(stop_at)]
        time.sleep(0.1)  # more are queued, not taken
        state = pickle.loads(pickle.dumps(feeder.state_dict()))
    assert q.size() > 0, "the queue held elements the graph had not taken"
    q.close(cancel_pending=True)
    q.reopen()
    with tq.Feeder(q, Tagged(29), state=state, **settings):
        rest = drain(f)
    want = expected(29, epochs=3, shuffle=True, seed=5)
    if ordered:
        assert_same(first + rest, want)
        assert state["position"] == stop_at
    else:
        key = lambda element: tuple(element[1])  # noqa: E731
        assert sorted(map(key, first + rest)) == sorted(map(key, want))
        by_key = {key(w): w for w in want}
        assert_same(first + rest, [by_key[key(g)] for g in first + rest])


def test_resume_an_iterable_with_workers():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Shards(13), workers=2) as feeder:
        first = [q.get(timeout=20) for _ in range(5)]
        time.sleep(0.1)
        state = feeder.state_dict()
    assert state["consumed"] == [3, 2]
    q.close(cancel_pending=True)
    q.reopen()
    with tq.Feeder(q, Shards(13), workers=2, state=state):
        rest = drain(getter(q))
    assert_same(first + rest, [expected_batch(range(b * ROWS, b * ROWS + 1 + b % ROWS)) for b in range(13)])
    with pytest.raises(ValueError, match="same number of workers"):
        tq.Feeder(q, Shards(13), workers=3, state=state)


# ---- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_sample_raising_reaches_the_consumer_with_its_index_and_traceback(workers):
    import theano

    q = tq.Queue(SPEC, capacity=2, target="cpu")
    f = theano.function([], q.dequeue())
    with tq.Feeder(q, Tagged(40, fail_at=19), workers=workers) as feeder:
        got = []
        with pytest.raises(tq.FeederError, match="ValueError: cannot decode sample 19") as info:
            while True:
                got.append(f())
    assert_same(got, expected(16)), "the two batches before the failing one arrive"
    err = info.value
    assert err.index == 19 and err.worker in ((None,) if workers == 0 else (0, 1))
    assert "decode_failure" in err.worker_traceback and "worker_datasets.py" in err.worker_traceback
    assert isinstance(feeder.exception, tq.FeederError) and "Traceback" in str(feeder.exception)
    if workers == 0:  # raised in this process: the sample's own exception is kept too
        assert isinstance(feeder.exception.__cause__, ValueError)


def test_a_bad_sample_is_named():
    q = tq.Queue([("x", "float32", (4, 5, 2)), ("y", "int64", (4,))], capacity=2, target="cpu")
    with tq.Feeder(q, Tagged(8), workers=1):
        with pytest.raises(tq.FeederError, match=r"component 'x': expected shape \(5, 2\) for a sample.*\(5, 3\)"):
            q.get(timeout=20)


def test_a_killed_worker_fails_the_consumer_within_a_second():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Tagged(100_000, jitter=0.004), workers=2, epochs=None) as feeder:
        q.get(timeout=20)
        victim = feeder.stats()["pids"][1]
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(tq.FeederError, match="worker 1 .* was killed by SIGKILL") as info:
            while True:
                q.get(timeout=5)
        assert time.monotonic() - killed < 1.0
    assert info.value.worker == 1
    assert wait_gone(feeder.stats()["pids"], 2) == []


def test_a_worker_that_kills_itself_mid_sample():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Tagged(64, kill_at=21), workers=2):
        got = []
        with pytest.raises(tq.FeederError, match=r"SIGKILL while producing samples \[.*21"):
            while True:
                got.append(q.get(timeout=20))
    assert len(got) == 2


def test_arguments_are_checked():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with pytest.raises(ValueError, match="map-style"):
        tq.Feeder(q, Shards(3), shuffle=True)
    with pytest.raises(ValueError, match="workers must be an int"):
        tq.Feeder(q, Tagged(3), workers=-1)
    with pytest.raises(TypeError, match="fill function"):
        tq.Feeder(q, fill=lambda x, y: None, workers=2)
    with pytest.raises(ValueError, match="no batch axis"):
        tq.Feeder(tq.Queue([("x", "float32", ())], target="cpu"), Tagged(3))
    with pytest.raises(
        ValueError, match="batch_size: saved 4, this Feeder has 8 \\(resume it into a queue of batches of 4"
    ):
        state = Sampler(10, 4).state_dict(Sampler(10, 4).cursor())
        tq.Feeder(q, Tagged(10), state=state)
    unpicklable = Tagged(16)
    unpicklable.lock = threading.Lock()  # cloudpickle sends lambdas and local classes, not locks
    with pytest.raises(TypeError, match="picklable dataset"):
        tq.Feeder(q, unpicklable, workers=1)
    with tq.Feeder(q, unpicklable, workers=1, start_method="fork"):  # fork needs no pickling
        assert_same(drain(getter(q)), expected(16))


# ---- stopping ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["exception", "close", "queue closed"])
def test_workers_stuck_in_the_dataset_are_stopped_within_two_seconds(how):
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    feeder = tq.Feeder(q, Tagged(100, slow="all", slow_s=60), workers=2)
    with pytest.raises(RuntimeError, match="training failed") if how == "exception" else _nothing():
        with feeder:
            wait_ready(feeder)
            time.sleep(0.2)  # every worker is inside a sample
            pids = feeder.stats()["pids"]
            started = time.monotonic()
            if how == "exception":
                raise RuntimeError("training failed")
            if how == "close":
                feeder.close()
            else:
                q.close(cancel_pending=True)
                assert feeder.join(5)
    assert time.monotonic() - started < 2.0
    assert wait_gone(pids, 0.1) == []
    assert not feeder.running and q.closed


def test_a_slot_goes_back_only_when_no_worker_writes_it_any_more():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    feeder = tq.Feeder(q, Tagged(100, slow="all", slow_s=0.3), workers=2, close_when_done=False).start()
    wait_ready(feeder)
    time.sleep(0.1)  # both slots are being written, a row at a time
    feeder.stop()
    zeros = (np.zeros((ROWS, 5, 3), "float32"), np.zeros(ROWS, "int64"))
    q.put(zeros, timeout=5)  # takes a slot the feeder gave back
    time.sleep(0.5)  # a worker still writing would land in it now
    assert all(np.array_equal(a, b) for a, b in zip(q.get(timeout=5), zeros)), "a stale row was written"
    assert feeder.join(5)


def test_stop_wakes_a_map_style_feeder_waiting_for_space_at_once():
    q = tq.Queue(SPEC, capacity=1, target="cpu")
    feeder = tq.Feeder(q, Tagged(100), close_when_done=False)
    assert stop_wakes_a_feeder_waiting_for_space(q, feeder), "woken, not polled"


@pytest.mark.parametrize("workers", [0, 2])
def test_the_queues_timeout_does_not_bound_the_wait_for_space(workers):
    q = tq.Queue(SPEC, capacity=1, target="cpu", timeout=0.05)
    with tq.Feeder(q, Tagged(4 * ROWS), workers=workers) as feeder:
        got = []
        for _ in range(4):
            time.sleep(0.2)  # a slow consumer: the producers wait longer than the queue's timeout
            got.append(q.get(timeout=20))
    assert_same(got, expected(4 * ROWS))
    assert feeder.exception is None


def test_the_shared_staging_is_refused_clearly():
    q = tq.Queue(SPEC, capacity=2, target="cpu", name="shared")
    ring = q._ring
    assert ring.staging_bytes >= 2 * (ring.slot_offset(1) - ring.slot_offset(0)) > 0
    os.close(ring.staging_fd())
    with pytest.raises(ValueError, match=r"Ring.slot_offset: queue 'shared': no slot 2"):
        ring.slot_offset(2)
    with pytest.raises(ValueError, match=r"Ring.swap_staging: queue 'shared': .*must be reserved"):
        ring.swap_staging(0, 1)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_stats_say_how_busy_the_workers_are():
    q = tq.Queue(SPEC, capacity=4, target="cpu")
    with tq.Feeder(q, Heavy(96, ms=5), workers=2) as feeder:
        wait_ready(feeder)
        got = drain(getter(q))
    stats = feeder.stats()
    assert len(got) == 12 and stats["samples"] == 96 and stats["elements"] == 12
    assert len(stats["worker_busy"]) == 2 and 0.3 < stats["busy"] <= 1.0, stats
    assert stats["samples_per_s"] > 0 and stats["startup_s"] > 0


class TaggedWithoutReadInto(Tagged):
    # A subclass that switches read_into off by setting it to None (bench/pipelines.py's AugmentCopying does):
    # None means "no read_into", as an absent attribute does, in the workers as in the Feeder's thread.
    read_into = None


@pytest.mark.parametrize("workers", [0, 2])
def test_read_into_none_means_the_dataset_is_read_by_getitem(workers):
    q = tq.Queue(SPEC, capacity=3, target="cpu")
    with tq.Feeder(q, TaggedWithoutReadInto(20), workers=workers):
        got = drain(getter(q))
    assert_same(got, expected(20))
