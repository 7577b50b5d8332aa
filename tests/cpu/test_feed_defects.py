"""The feeding defects of issue 18 (and items 5 and 8 of issue 19), one test each."""

import gc
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from timing import scaled
from worker_datasets import ROWS, SPEC, Tagged

import theano_queue as tq

XY = [("x", "float32", (4, 3)), ("y", "int32", (4,))]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def drain(q, timeout=20):
    got = []
    while True:
        try:
            got.append(q.get(timeout=timeout))
        except tq.QueueClosed:
            return got


def xy_batches(n, start=0):
    return [(np.full((4, 3), i, "float32"), np.full(4, i, "int32")) for i in range(start, start + n)]


# ---- 1. a producer-side error with workers reaches the consumer --------------------------------------


def raise_on_length(sample):
    raise ZeroDivisionError("no length for this sample")


def no_length(sample):
    return None


@pytest.mark.parametrize("bucket_by", [raise_on_length, no_length])
@pytest.mark.parametrize("workers", [0, 1])
def test_an_error_computing_the_batches_reaches_the_consumer_and_the_queue_reopens(bucket_by, workers):
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    feeder = tq.Feeder(q, Tagged(20), workers=workers, bucket_by=bucket_by).start()
    began = time.monotonic()
    with pytest.raises(tq.FeederError) as err:
        q.get(timeout=30)  # a QueueTimeout here is the hang
    assert time.monotonic() - began < 30
    assert "bucket_by" in str(err.value) + str(err.value.__cause__)
    assert feeder.join(5)
    q.close(cancel_pending=True)
    q.reopen()
    q.put(np.zeros((ROWS, 5, 3), "float32"), np.arange(ROWS))
    assert q.get(timeout=5)[1].tolist() == list(range(ROWS))


# ---- 3. nothing from a cancelled Feeder lands after a reopen ----------------------------------------


def test_a_cancelled_feeders_samples_never_reach_the_reopened_queue():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    old = tq.Feeder(q, Tagged(400, slow="all", slow_s=0.01), workers=2).start()
    q.get(timeout=30)
    q.close(cancel_pending=True)
    q.reopen()  # stops the old Feeder: its samples belong to the epoch that was cancelled
    assert not old.running
    mine = np.full(ROWS, -7, "int64")
    q.put(np.zeros((ROWS, 5, 3), "float32"), mine)
    time.sleep(0.3)
    assert not q.closed, "the cancelled Feeder closed the reopened queue"
    q.close()
    assert [y.tolist() for _, y in drain(q)] == [mine.tolist()]
    old.close()
    assert not q.closed or q.size() == 0


# ---- 4. the queue closes when the last attached Feeder is done --------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_two_feeders_close_the_queue_when_the_last_is_done(workers):
    q = tq.Queue(XY, capacity=2, target="cpu")
    short, long = xy_batches(6), xy_batches(30, start=100)  # more than the queue holds: both stay attached
    with tq.Feeder(q, short), tq.Feeder(q, long, workers=workers) as second:
        assert len(q.feeders) == 2
        got = drain(q)
    assert sorted(int(y[0]) for _, y in got) == list(range(6)) + list(range(100, 130))
    assert second.produced == 30 and q.feeders == []


# ---- 5. a hung worker is noticed ---------------------------------------------------------------------


def test_a_sample_slower_than_the_timeout_is_a_feeder_error_naming_the_worker():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Tagged(16, slow={3}, slow_s=60), workers=1, timeout=1.0) as feeder:
        with pytest.raises(tq.FeederError) as err:
            drain(q, timeout=60)
        pid = feeder.stats()["pids"][0]
    message = str(err.value) + str(err.value.__cause__)
    assert "worker 0" in message and "pid %d" % pid in message and "timeout=1" in message
    assert "3" in message


def test_a_slow_sample_is_logged_once_without_a_timeout(monkeypatch, caplog):
    from theano_queue.feed import watch

    monkeypatch.setattr(watch, "SLOW_SAMPLE_S", 0.5)
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with caplog.at_level(logging.WARNING, logger="theano_queue"):
        with tq.Feeder(q, Tagged(16, slow={0, 9}, slow_s=1.5), workers=1):
            assert len(drain(q, timeout=60)) == 2
    slow = [r for r in caplog.records if "taken over" in r.getMessage()]
    assert len(slow) == 1, [r.getMessage() for r in caplog.records]
    assert "worker 0" in slow[0].getMessage()


def test_timeout_is_checked():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with pytest.raises(ValueError, match="timeout"):
        tq.Feeder(q, Tagged(4), workers=1, timeout=-1)
    with pytest.raises(ValueError, match="timeout.*workers"):
        tq.Feeder(q, Tagged(4), workers=0, timeout=5)


# ---- 6. classes the workers cannot import --------------------------------------------------------------


def test_a_dataset_class_defined_in_a_function_runs_in_spawned_workers():
    class Local:
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return np.full((5, 3), i, "float32"), np.int64(i)

    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Local(), workers=2, bucket_by=lambda sample: int(sample[1]) % 3):
        got = drain(q)
    assert sorted(int(i) for _, y in got for i in y) == list(range(16))


MAIN_DATASET = textwrap.dedent("""
    import numpy as np
    import theano_queue as tq

    class DS:
        def __len__(self):
            return 12

        def __getitem__(self, i):
            return np.full(2, i, "float32")

    q = tq.Queue([("x", "float32", (4, 2))], capacity=2, target="cpu")
    total = 0
    with tq.Feeder(q, DS(), workers=2):
        try:
            while True:
                total += int(q.get(timeout=60)[0][:, 0].sum())
        except tq.QueueClosed:
            print(total)
""")


def test_a_dataset_class_defined_in_python_dash_c_runs_in_spawned_workers():
    out = subprocess.run(
        [sys.executable, "-c", MAIN_DATASET], cwd=ROOT, capture_output=True, text=True, timeout=scaled(180)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(sum(range(12)))]


def test_a_dataset_that_cannot_be_pickled_says_why():
    dataset = Tagged(16)
    dataset.lock = threading.Lock()
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with pytest.raises(TypeError, match="picklable dataset.*lock"):
        tq.Feeder(q, dataset, workers=1)


# ---- 7. saved states are validated -----------------------------------------------------------------


def good_map_state():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    return tq.Feeder(q, Tagged(40)).state_dict()


@pytest.mark.parametrize(
    "field, value",
    [
        ("position", -3),
        ("position", True),
        ("position", "2"),
        ("done", [-1]),
        ("done", 5),
        ("version", 9),
        ("kind", None),
    ],
)
def test_a_corrupted_map_state_is_refused_naming_the_field(field, value):
    state = good_map_state()
    state[field] = value
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with pytest.raises(ValueError, match=field):
        tq.Feeder(q, Tagged(40), state=state)


@pytest.mark.parametrize("field", ["position", "seed", "batch_size"])
def test_a_map_state_missing_a_field_is_a_value_error(field):
    state = good_map_state()
    del state[field]
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with pytest.raises(ValueError, match=field):
        tq.Feeder(q, Tagged(40), state=state)


@pytest.mark.parametrize("consumed", [[-1], [True], ["1"], 3, None])
def test_a_corrupted_iterable_state_is_refused_naming_the_field(consumed):
    state = {"version": 1, "kind": "iterable", "consumed": consumed}
    q = tq.Queue(XY, capacity=2, target="cpu")
    with pytest.raises(ValueError, match="consumed"):
        tq.Feeder(q, xy_batches(3), state=state)


# ---- 8. resources -------------------------------------------------------------------------------------


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_finished_worker_feeders_release_their_fds_without_gc():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Tagged(8), workers=2):
        drain(q)
    q.reopen()
    gc.collect()
    gc.disable()
    try:
        before = open_fds()
        for _ in range(3):
            with tq.Feeder(q, Tagged(8), workers=2):
                drain(q)
            q.reopen()
        assert open_fds() <= before + 1
    finally:
        gc.enable()


def test_a_dropped_feeder_and_queue_release_their_workers_and_threads():
    def start():
        q = tq.Queue(SPEC, capacity=1, target="cpu")
        feeder = tq.Feeder(q, Tagged(400), workers=2).start()
        deadline = time.monotonic() + 30
        while len(feeder.stats()["pids"]) < 2 or feeder.stats()["startup_s"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        return feeder.stats()["pids"]

    threads = threading.active_count()
    pids = start()
    gc.collect()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (threading.active_count() > threads or any(_alive(p) for p in pids)):
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]
    assert threading.active_count() <= threads


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---- 10. messages -------------------------------------------------------------------------------------


def test_a_bare_array_for_two_components_says_so():
    q = tq.Queue(XY, capacity=2, target="cpu")
    with tq.Feeder(q, [np.zeros(3, "float32")]):
        with pytest.raises(tq.FeederError) as err:
            drain(q)
    message = str(err.value.__cause__)
    assert "a bare array of shape (3,)" in message and "got 3" not in message


def test_a_bucket_by_error_names_the_feeder_once():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with pytest.raises(ValueError) as err:
        tq.Feeder(q, Tagged(20), bucket_by=np.arange(3))  # lengths of 3 samples for 20
    assert str(err.value).startswith("Feeder(%s): bucket_by" % q.name)
    assert str(err.value).count("Feeder(") == 1
    feeder = tq.Feeder(q, Tagged(20), bucket_by=no_length).start()
    with pytest.raises(tq.FeederError) as err:
        drain(q)
    feeder.close()
    assert "bucket_by gave None for sample 0" in str(err.value.__cause__)


# ---- issue 19, 5. leaving an epoch early --------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_leaving_an_epoch_early_leaves_the_queue_ready_for_the_next(workers):
    q = tq.Queue(XY, capacity=3, target="cpu")
    for epoch in range(3):
        q.reopen()
        with tq.Feeder(q, xy_batches(20, start=100 * epoch), workers=workers):
            got = [int(q.get(timeout=20)[1][0]) for _ in range(2)]  # then leave the epoch
        assert got == [100 * epoch, 100 * epoch + 1]
    q.reopen()
    with tq.Feeder(q, xy_batches(2, start=900)):
        assert [int(y[0]) for _, y in drain(q)] == [900, 901], "an element of an abandoned epoch came back"


def test_the_elements_left_by_a_finished_feeder_are_still_taken_before_the_next_epoch():
    q = tq.Queue(XY, capacity=4, target="cpu")
    with tq.Feeder(q, xy_batches(3)) as feeder:
        feeder.join(10)
    assert [int(y[0]) for _, y in drain(q)] == [0, 1, 2]


# ---- issue 19, 8. array datasets in Fortran order ----------------------------------------------------


def test_a_fortran_order_memmap_is_gathered_without_a_whole_copy(tmp_path, monkeypatch):
    path = tmp_path / "x.f32"
    data = np.asfortranarray(np.arange(40 * 3, dtype="float32").reshape(40, 3))
    mm = np.memmap(path, "float32", "w+", shape=(40, 3), order="F")
    mm[...] = data
    mm.flush()
    mm = np.memmap(path, "float32", "r", shape=(40, 3), order="F")
    assert not mm[0].flags.c_contiguous
    copied = []
    real = np.ascontiguousarray
    monkeypatch.setattr(np, "ascontiguousarray", lambda a, *args, **kw: copied.append(a.shape) or real(a, *args, **kw))
    q = tq.Queue([("x", "float32", (4, 3)), ("y", "int64", (4,))], capacity=2, target="cpu")
    with tq.Feeder(q, (mm, np.arange(40)), shuffle=True, seed=1) as feeder:
        got = drain(q)
    assert (40, 3) not in copied, "the whole memmap was copied"
    assert feeder.produced == 10
    for x, y in got:
        assert np.array_equal(x, data[y])
