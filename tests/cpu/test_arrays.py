"""Array datasets: a tuple or dict of arrays fed by native gathers (Ring.put_rows, c_code/engine/core/tq_gather.c)."""

import os
import pickle
import threading
import time

import numpy as np
import pytest
import theano
from arrays_helpers import check_bit_exact, rows_of
from helpers import drain, holding_the_gil

import theano_queue as tq
from theano_queue.feed.arrays import ArrayProducer
from theano_queue.sampler import Sampler

N, BATCH, FEAT = 103, 8, 7  # 12 full batches and a partial one of 7 rows; rows of 28 bytes


def dataset(n=N, feat=FEAT):
    x = np.arange(n * feat, dtype="float32").reshape(n, feat)
    return x, np.arange(n, dtype="int64")


def native_threads():
    """The ids of the process's threads, the engine's own included (Python's threading sees only its own).

    A set, not a count: a thread of an earlier test that ends meanwhile must not pass for one of this test's."""
    return set(os.listdir("/proc/self/task"))


def queue(capacity=4, feat=FEAT, target="cpu", batch=BATCH):
    return tq.Queue([("x", "float32", (batch, feat)), ("i", "int64", (batch,))], capacity=capacity, target=target)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("as_dict", [False, True])
def test_every_row_exactly_once_per_epoch(shuffle, as_dict):
    x, i = dataset()
    q = queue()
    source = {"x": x, "i": i} if as_dict else (x, i)
    with tq.Feeder(q, source, shuffle=shuffle, seed=3, epochs=2) as feeder:
        got = drain(q)
    assert feeder.batches_per_epoch == 13 and feeder.planned_elements == 26 and len(got) == 26
    check_bit_exact(got, x)
    for epoch in (got[:13], got[13:]):
        assert sorted(rows_of(epoch)) == list(range(N))
        assert [len(ids) for _, ids in epoch] == [BATCH] * 12 + [N % BATCH]
    assert (rows_of(got[:13]) == list(range(N))) != shuffle
    # The same batches as a map-style dataset's sampler gives.
    sampler = Sampler(N, BATCH, shuffle=shuffle, seed=3, epochs=2)
    assert [list(ids) for _, ids in got] == [list(sampler.batch(p)) for p in range(26)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_are_disjoint_and_complete(shuffle):
    x, i = dataset()
    seen = []
    for rank in range(3):
        q = queue()
        with tq.Feeder(q, (x, i), shuffle=shuffle, seed=1, shard=(rank, 3), drop_last=True):
            got = drain(q)
        check_bit_exact(got, x)
        seen.append(rows_of(got))
    every = sum(seen, [])
    assert len(every) == len(set(every)) == 3 * (N // 3 // BATCH) * BATCH


def test_shards_without_drop_last_cover_the_epoch():
    x, i = dataset()
    seen = []
    for rank in range(2):
        q = queue()
        with tq.Feeder(q, (x, i), shuffle=True, seed=4, shard=(rank, 2)):
            seen += rows_of(drain(q))
    assert set(seen) == set(range(N)) and len(seen) == N + 1  # one row repeated as padding, as DistributedSampler


def test_drop_last_drops_the_partial_batch():
    x, i = dataset()
    q = queue()
    with tq.Feeder(q, (x, i), shuffle=True, drop_last=True, epochs=3) as feeder:
        got = drain(q)
    assert feeder.batches_per_epoch == 12 and len(got) == 36
    assert all(len(ids) == BATCH for _, ids in got)
    check_bit_exact(got, x)


@pytest.mark.parametrize("stop_at", [5, 13, 20])
def test_resume_across_epochs(stop_at):
    x, i = dataset()
    q = queue(capacity=3)
    settings = dict(shuffle=True, seed=9, epochs=3)
    f = theano.function([], q.dequeue())
    with tq.Feeder(q, (x, i), **settings) as feeder:
        first = [f() for _ in range(stop_at)]
        time.sleep(0.1)  # more are queued, not taken
        state = pickle.loads(pickle.dumps(feeder.state_dict()))
    assert state["position"] == stop_at and state["kind"] == "map"
    q.close(cancel_pending=True)
    q.reopen()
    with tq.Feeder(q, (x, i), state=state, **settings):
        rest = [tuple(np.array(a) for a in e) for e in iter(lambda: _take(f), None)]
    got = [tuple(np.array(a) for a in e) for e in first] + rest
    sampler = Sampler(N, BATCH, shuffle=True, seed=9, epochs=3)
    assert [list(ids) for _, ids in got] == [list(sampler.batch(p)) for p in range(39)]
    check_bit_exact(got, x)


def _take(f):
    try:
        return f()
    except tq.QueueClosed:
        return None


def test_memmap_source(tmp_path):
    x, i = dataset()
    path = str(tmp_path / "x.f32")
    mm = np.memmap(path, dtype="float32", mode="w+", shape=x.shape)
    mm[:] = x
    mm.flush()
    del mm
    source = np.memmap(path, dtype="float32", mode="r", shape=x.shape)
    q = queue()
    with tq.Feeder(q, {"x": source, "i": i}, shuffle=True, seed=2):
        got = drain(q)
    assert sorted(rows_of(got)) == list(range(N))
    check_bit_exact(got, x)


@pytest.mark.parametrize(
    "feat,dtype", [(1, "uint8"), (3, "uint8"), (5, "int16"), (13, "float32"), (4099, "float64"), (1, "float64")]
)
def test_gather_bit_exact_for_odd_rows(feat, dtype):
    """Odd row sizes, rows not 16-byte aligned, runs of consecutive rows and single rows, small and large batches."""
    rng = np.random.default_rng(feat)
    n, batch = 517, 64
    x = rng.integers(0, 255, size=(n, feat)).astype(dtype)
    x = np.ascontiguousarray(x[:, :feat])
    q = tq.Queue([("x", dtype, (batch, feat)), ("i", "int64", (batch,))], capacity=3, target="cpu")
    with tq.Feeder(q, (x, np.arange(n)), shuffle=True, seed=feat, epochs=2):
        got = drain(q)
    check_bit_exact(got, x)
    assert sorted(rows_of(got)) == sorted(list(range(n)) * 2)


def copy_pool_cpu_ns(threads):
    """CPU time (ns) each of these threads of this process has run; the pool's threads only run when given work."""
    times = []
    for tid in threads:
        with open("/proc/self/task/%s/schedstat" % tid) as f:
            times.append(int(f.read().split()[0]))
    return times


@pytest.mark.skipif(not os.path.exists("/proc/self/task/%d/schedstat" % os.getpid()), reason="needs Linux schedstat")
def test_large_gather_is_shared_among_threads_and_exact():
    """Batches above the copy pool's threshold: chunks of rows copied by several threads, streaming stores."""
    from theano_queue import _engine

    n, feat = 4000, 1027
    x = np.random.default_rng(0).standard_normal((n, feat)).astype("float32")
    before, threads = set(os.listdir("/proc/self/task")), _engine.copy_threads()
    _engine.set_copy_threads(3)  # a new pool, made by the next large copy: its threads are the new ones
    try:
        warm = tq.Queue([("x", "float32", (1 << 21,))], capacity=1, target="cpu")
        warm.put(np.ones(1 << 21, "float32"))
        pool = set(os.listdir("/proc/self/task")) - before
        assert pool, "the pool's threads"
        idle = copy_pool_cpu_ns(pool)
        q = tq.Queue([("x", "float32", (1000, feat)), ("i", "int64", (1000,))], capacity=4, target="cpu")
        with tq.Feeder(q, (x, np.arange(n)), shuffle=True, seed=1) as feeder:
            feeder.join()  # all four batches gathered into the ring; nothing taken (a get copies with the pool too)
            worked = [after - was for after, was in zip(copy_pool_cpu_ns(pool), idle)]
            got = drain(q)
    finally:
        _engine.set_copy_threads(threads)
    assert max(worked) > 0, "no thread of the copy pool took part in the gather"
    check_bit_exact(got, x)
    q = tq.Queue([("x", "float32", (1000, feat)), ("i", "int64", (1000,))], capacity=2, target="cpu")
    with tq.Feeder(q, (x, np.arange(n))):  # in order: one block per batch
        got = drain(q)
    check_bit_exact(got, x)


def test_strided_rows_are_gathered():
    x, i = dataset(2 * N)
    q = queue()
    with tq.Feeder(q, (x[::2], i[::2]), shuffle=True):
        got = drain(q)
    check_bit_exact(got, x)
    assert sorted(rows_of(got)) == list(range(0, 2 * N, 2))


def test_safe_cast_is_converted_and_unsafe_refused_naming_the_component():
    x, i = dataset()
    q = queue()
    with tq.Feeder(q, (x, i.astype("int32"))):
        got = drain(q)
    check_bit_exact(got, x)
    with pytest.raises(TypeError, match=r"component 'x': expected dtype float32, got float64"):
        tq.Feeder(queue(), (x.astype("float64"), i))


def test_bad_shapes_are_refused_naming_the_component():
    x, i = dataset()
    with pytest.raises(ValueError, match=r"component 'x': expected rows of shape \(7,\).*\(103, 6\)"):
        tq.Feeder(queue(), (x[:, :6], i))
    with pytest.raises(ValueError, match=r"component 'x' has 103 rows and component 'i' 100; the components of"):
        tq.Feeder(queue(), (x, i[:100]))
    with pytest.raises(ValueError, match=r"expected 2 components \(x, i\), got 1 array"):
        tq.Feeder(queue(), (x,))
    with pytest.raises(ValueError, match=r"keyed \['x', 'i'\]"):
        tq.Feeder(queue(), {"x": x, "j": i})
    with pytest.raises(TypeError, match="workers=0"):
        tq.Feeder(queue(), (x, i), workers=2)


def test_put_rows_checks_its_indices():
    x, i = dataset()
    q = queue()
    with pytest.raises(IndexError, match="row index 103 is outside the sources' 103 rows"):
        q._ring.put_rows((x, i), np.array([0, 103]), BATCH, 0, 1)
    assert q.size() == 0


def wait_for(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)
    return condition()


def test_a_feeder_on_a_full_queue_sleeps_until_half_of_it_is_free():
    """One dequeue does not wake the Feeder for one batch: it writes again once half the slots are free."""
    x, i = dataset()
    q = queue(capacity=4)
    with tq.Feeder(q, (x, i), epochs=None):
        assert wait_for(lambda: q.size() == 4)
        q.get()
        time.sleep(0.2)
        assert q.stats()["enqueued"] == 4 and q.size() == 3  # left asleep: one slot free
        q.get()
        assert wait_for(lambda: q.stats()["enqueued"] == 6 and q.size() == 4)


def test_a_feeder_of_large_batches_refills_every_free_slot_at_once():
    """Half a queue of large batches written in a row would hold the cores the step needs: room 1 for them."""
    rows = ArrayProducer.SMALL_BATCH_BYTES // (4 * 64) + 1
    x = np.zeros((2 * rows, 64), np.float32)
    q = tq.Queue([("x", "float32", (rows, 64))], capacity=4)
    with tq.Feeder(q, (x,), epochs=None):
        assert wait_for(lambda: q.size() == 4)
        q.get()
        assert wait_for(lambda: q.stats()["enqueued"] == 5 and q.size() == 4)
    assert ArrayProducer.refill_room(4, ArrayProducer.SMALL_BATCH_BYTES - 1) == 2
    assert ArrayProducer.refill_room(3, 10) == 1


def test_a_put_beside_a_sleeping_feeder_takes_the_first_free_slot():
    """Another producer's put is not held back by the Feeder's wait for more room."""
    x, i = dataset()
    q = queue(capacity=4)
    with tq.Feeder(q, (x, i), epochs=None):
        assert wait_for(lambda: q.size() == 4)
        put = threading.Thread(target=q.put, args=(np.zeros((BATCH, FEAT), "float32"), np.zeros(BATCH, "int64")))
        put.start()
        time.sleep(0.05)
        q.get()
        put.join(10)
        assert not put.is_alive() and q.stats()["enqueued"] == 5


def test_the_next_epochs_order_is_shuffled_while_the_epoch_before_it_is_written(monkeypatch):
    """Each shuffled epoch's permutation after the first is begun (in the engine's idle time, off the GIL)
    while the epoch before it is written, not when it begins: the queue does not run dry at each epoch's
    start.  The batches are the Sampler's all the same."""
    begun_after = {}  # epoch -> the batches put when its shuffle began
    permuting = Sampler.permuting

    def recorded(self, epoch):
        begun_after[epoch] = q.stats()["enqueued"]
        return permuting(self, epoch)

    monkeypatch.setattr(Sampler, "permuting", recorded)
    x, i = dataset()
    q = queue()
    with tq.Feeder(q, (x, i), shuffle=True, seed=5, epochs=4):
        got = drain(q)
    per_epoch = -(-N // BATCH)
    for epoch in (1, 2, 3):
        assert (epoch - 1) * per_epoch <= begun_after[epoch] < epoch * per_epoch
    plain = Sampler(N, BATCH, shuffle=True, seed=5, epochs=4)
    assert rows_of(got) == [int(r) for e in range(4) for r in plain.order(e)]
    numpys = [np.random.Generator(np.random.PCG64(np.random.SeedSequence([5, e]))).permutation(N) for e in range(4)]
    assert rows_of(got) == [int(r) for p in numpys for r in p]


def test_an_order_not_made_ahead_in_time_is_made_by_the_feeder_without_waiting(monkeypatch):
    """On a machine with no idle core the order's thread may get no core: the Feeder makes the epoch's order
    itself rather than wait on it, and ends that thread without waiting either."""

    class Starved:
        closed = []

        def done(self):
            return False

        def result(self):
            raise AssertionError("waited on a thread that gets no core")

        def close(self, wait=True):
            Starved.closed.append(wait)
            return True

    monkeypatch.setattr(Sampler, "permuting", lambda self, epoch: Starved())
    x, i = dataset()
    q = queue()
    with tq.Feeder(q, (x, i), shuffle=True, seed=5, epochs=3):
        got = drain(q)
    plain = Sampler(N, BATCH, shuffle=True, seed=5, epochs=3)
    assert rows_of(got) == [int(r) for e in range(3) for r in plain.order(e)]
    assert Starved.closed == [False, False]  # epochs 1 and 2, each ended without a wait


def test_stop_ends_the_next_epochs_permutation_with_the_run():
    """Stopped mid-epoch, a Feeder of a large shuffled dataset ends the next epoch's permutation in the making
    too: the stop is prompt, and no thread of the run is left."""
    x, i = dataset(n=3_000_000, feat=1)
    q = queue(capacity=2, feat=1)
    before = native_threads()
    feeder = tq.Feeder(q, (x, i), shuffle=True, seed=1, epochs=None).start()
    # The Feeder's own thread: `running` says when it has ended.  The kernel may reap it seconds later on a
    # loaded machine (seen under CI), so it is not one of the threads that must be gone.
    feeders_own = str(feeder._thread.native_id)
    assert q.get(timeout=10) is not None  # epoch 0 is written: epoch 1's permutation is in the making
    began = time.monotonic()
    feeder.close()
    assert time.monotonic() - began < 2.0 and not feeder.running
    assert wait_for(lambda: not native_threads() - before - {feeders_own}), native_threads() - before


def test_put_rows_refuses_a_room_below_one():
    x, i = dataset()
    with pytest.raises(ValueError, match="room >= 1"):
        queue()._ring.put_rows((x, i), np.arange(N), BATCH, 0, 1, room=0)


def test_stop_ends_a_feeder_blocked_on_a_full_queue():
    x, i = dataset()
    q = queue(capacity=1)
    feeder = tq.Feeder(q, (x, i), epochs=None).start()
    time.sleep(0.2)
    started = time.monotonic()
    feeder.close()
    assert time.monotonic() - started < 2 and not feeder.running


def test_stop_ends_a_feeder_waiting_for_half_the_queue_to_be_free():
    """A Feeder of small batches waits for room (half the slots) and looks again at the consumer's pace rather
    than being woken by each take: close still ends it at once."""
    x, i = dataset()
    q = queue(capacity=8)
    assert ArrayProducer.refill_room(8, 1) == 4
    feeder = tq.Feeder(q, (x, i), epochs=None).start()
    for _ in range(20):  # a pace, then the queue full again
        q.get(timeout=5)
    time.sleep(0.2)
    started = time.monotonic()
    feeder.close()
    assert time.monotonic() - started < 2 and not feeder.running


def test_a_feeder_waiting_for_room_sleeps_while_its_consumer_pauses():
    """Looking again for room costs the Feeder's core a little, and next to nothing while the model pauses (an
    evaluation, a checkpoint): it backs off to a few hundred looks a second, not the fast pace it last saw."""
    x, i = dataset(4096)
    q = queue(capacity=8)
    with tq.Feeder(q, (x, i), epochs=None, close_when_done=False):
        for _ in range(200):  # a fast consumer: the pace is microseconds
            q.get(timeout=5)
        time.sleep(0.2)  # the queue full again, the Feeder waiting for room
        cpu = time.process_time()
        time.sleep(1.0)
        paused_cpu = time.process_time() - cpu
        q.close(cancel_pending=True)
    assert paused_cpu < 0.2, "the waiting Feeder used %.2f s of CPU in a 1 s pause" % paused_cpu


def test_a_consumer_in_bursts_and_pauses_gets_every_batch_once_in_order():
    """Takes in bursts (faster than the Feeder's look-again) and pauses (longer than it): the consumer wakes the
    Feeder when it is about to run dry, and no batch is lost, doubled or reordered."""
    x, i = dataset(2048)
    q = queue(capacity=4)
    got = []
    with tq.Feeder(q, (x, i), shuffle=True, seed=3, epochs=2):
        for k in range(10**6):
            try:
                got.append(q.get(timeout=10))
            except tq.QueueClosed:
                break
            if k % 7 == 6:
                time.sleep(0.003)
    plain = Sampler(2048, BATCH, shuffle=True, seed=3, epochs=2)
    assert rows_of(got) == [int(r) for e in range(2) for r in plain.order(e)]


def test_a_compiled_function_reads_the_batches_while_other_threads_run():
    """No Python per batch: the feeder's thread holds the GIL only between runs of batches."""
    x, i = dataset(4096, 64)
    q = queue(capacity=2, feat=64, batch=64)
    xv, iv = q.dequeue()
    f = theano.function([], [xv.sum(), iv])
    ticks = []
    ticker = threading.Thread(target=lambda: [ticks.append(time.sleep(0.001)) for _ in range(50)])
    with tq.Feeder(q, (x, i), shuffle=True, epochs=2):
        ticker.start()
        sums = []
        for _ in range(128):
            s, ids = f()
            sums.append((s, ids.copy()))
    ticker.join()
    for s, ids in sums:
        assert s == pytest.approx(x[ids].sum(dtype="float64"), rel=1e-5)


def test_an_array_feeder_refills_the_queue_while_the_training_thread_holds_the_gil():
    # Theano holds the GIL through a whole step: an array dataset's batches
    # must not need it, or every batch would wait for the step to end.
    capacity = 16
    q = queue(capacity=capacity)
    x, ids = dataset(n=4096)
    with tq.Feeder(q, (x, ids), epochs=None, close_when_done=False):
        deadline = time.monotonic() + 10
        while q.size() < capacity and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.02)  # the feeder now waits for room

        def take_all_then_hold():
            for _ in range(capacity):
                q.get()
            return holding_the_gil(0.3, q.size)

        assert take_all_then_hold() == capacity
    q.close(cancel_pending=True)
