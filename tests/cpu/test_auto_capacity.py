"""Queue(capacity="auto") (issue 44.2): the rules with made-up windows, the budget, and a queue whose depth changes
under a running producer and consumer without losing or reordering an element."""

import threading
import time

import numpy as np
import pytest

import theano_queue as tq
from theano_queue import _engine
from theano_queue.feed.tune_capacity import (
    AUTO_MOST_SLOTS,
    AutoCapacity,
    CapacityRule,
    ThreadsRule,
    Window,
    auto_slots,
)

MiB = 1 << 20


def window(waited, full, fill=0.5, elements=50, gather=None, busy=None, workers=None):
    return Window(
        seconds=1.0,
        elements=elements,
        model_waited=waited,
        ring_full=full,
        mean_fill=fill,
        gather_busy=gather,
        producers_busy=busy,
        workers=workers,
    )


def test_bursts_grow_the_ring_while_it_helps():
    rule = CapacityRule(slots=16)
    assert rule.decide(2, window(0.30, 0.20))[0] == 4  # model waited and producers found it full: a burst
    assert rule.decide(4, window(0.10, 0.10))[0] == 8  # it helped (30% -> 10%): kept, and again
    assert rule.decide(8, window(0.01, 0.02)) is None  # model barely waits, ring seldom full: stay
    assert rule.decide(8, window(0.30, 0.0)) is None  # waits without bursts: producers are simply slow


def test_a_growth_that_does_not_cut_the_wait_is_undone_and_not_tried_again():
    """The trial's case: busy workers hold every slot, the ring reads full and the model waits 89%; capacity 2, 4
    and 8 all left it waiting.  The rule tries once, sees no gain, and goes back for good."""
    rule = CapacityRule(slots=16)
    new, reason = rule.decide(2, window(0.89, 0.87))
    assert new == 4 and "ring full 87%" in reason
    new, reason = rule.decide(4, window(0.90, 0.87))
    assert new == 2 and reason.startswith("no gain: model waited 90% at 4")
    assert rule.decide(2, window(0.89, 0.87)) is None
    assert rule.decide(2, window(0.89, 0.87)) is None


def test_producers_busy_all_the_time_are_not_given_slots():
    """Busy workers hold every slot: the ring reads full while the model waits, and more slots do not help."""
    rule = CapacityRule(slots=16)
    assert rule.decide(2, window(0.89, 0.87, busy=0.95)) is None
    assert rule.decide(2, window(0.89, 0.87, busy=0.5))[0] == 4


def test_the_depth_gives_every_worker_a_slot_of_its_own_and_two_more():
    """Workers each write an element of their own while one is lent to the model and one waits ready (bench
    scenario 44: two busy workers made 1608 samples/s at capacity 2 and 1744 at 4).  Busy workers are still
    not given slots beyond that, and an always-full ring does not shrink below it."""
    rule = CapacityRule(slots=16)
    new, reason = rule.decide(2, window(0.89, 0.87, busy=0.97, workers=2))
    assert new == 4 and reason == "2 workers write an element each, one is lent, one waits ready: depth 4"
    assert rule.decide(4, window(0.89, 0.87, busy=0.97, workers=2)) is None
    assert rule.decide(4, window(0.0, 0.9, fill=3.9, workers=2)) is None  # always full, but floored at 4
    assert CapacityRule(slots=5).decide(2, window(0.5, 0.5, workers=8))[0] == 5  # within the allocated slots


def test_an_always_full_ring_shrinks_until_the_model_waits():
    rule = CapacityRule(slots=16)
    new, reason = rule.decide(8, window(0.0, 0.9, fill=7.9))
    assert new == 7 and reason.startswith("ring always full (fill 7.9/8)")
    assert rule.decide(7, window(0.0, 0.9, fill=6.8))[0] == 6
    assert rule.decide(6, window(0.2, 0.1, fill=1.0)) == (7, "model waited 20% at 6")  # undone: floored at 7
    assert rule.decide(7, window(0.0, 0.9, fill=6.9)) is None


def test_idle_windows_decide_nothing_and_bounds_hold():
    rule = CapacityRule(slots=4)
    assert rule.decide(2, window(0.5, 0.5, elements=0)) is None
    assert rule.decide(4, window(0.5, 0.5)) is None  # at the slots: no higher
    assert CapacityRule(slots=8).decide(2, window(0.0, 1.0, fill=2.0)) is None  # at the fewest: no lower


def test_threads_follow_the_gather_against_the_step():
    rule = ThreadsRule(most=4)
    assert rule.decide(1, window(0.4, 0.0, gather=0.95)) == (2, "gather took 95% of the step, model waited 40%")
    assert rule.decide(2, window(0.2, 0.0, gather=0.5)) is None  # 0.95 -> 0.5 ms an element: kept
    new, reason = rule.decide(2, window(0.0, 0.0, gather=0.3))
    assert new == 1 and "gather took 30%" in reason
    assert rule.decide(1, window(0.4, 0.0)) is None  # no gather measured: not the threads' business


def test_threads_that_do_not_speed_the_gather_are_given_back():
    rule = ThreadsRule(most=8)
    assert rule.decide(2, window(0.4, 0.0, gather=0.95))[0] == 3
    new, reason = rule.decide(3, window(0.4, 0.0, gather=0.95))
    assert new == 2 and reason.startswith("no gain")
    assert rule.decide(2, window(0.4, 0.0, gather=0.95)) is None  # capped at 2


def test_the_budget_sets_the_slots():
    assert auto_slots(10 * MiB, host_bytes=64 << 30, budget=50 * MiB) == (5, 50 * MiB)
    assert auto_slots(1 * MiB, host_bytes=64 << 30)[0] == AUTO_MOST_SLOTS
    assert auto_slots(100 * MiB, host_bytes=64 << 30, budget=MiB)[0] == 2  # two at least
    # a GPU queue: a quarter of the free device memory caps the budget
    assert auto_slots(10 * MiB, host_bytes=64 << 30, budget=1 << 30, device_free=200 * MiB) == (5, 50 * MiB)


def test_an_auto_queue_starts_small_within_its_budget_and_says_so():
    q = tq.Queue([("x", "float32", (16, 1024))], capacity="auto", memory_budget=8 * 64 * 1024, target="cpu")
    assert q.capacity == 2 and q.stats()["capacity"] == 2 and q.stats()["slots"] == 8
    assert q.port.auto.as_dict()["capacity"] == 2
    with pytest.raises(ValueError, match='memory_budget is for capacity="auto"'):
        tq.Queue([("x", "float32", (4,))], capacity=3, memory_budget=100, target="cpu")
    with pytest.raises(ValueError, match="an int from 1 to .* or \"auto\", got 'big'"):
        tq.Queue([("x", "float32", (4,))], capacity="big", target="cpu")
    fixed = tq.Queue([("x", "float32", (4,))], capacity=3, target="cpu")
    assert fixed.port.auto is None and fixed.stats()["slots"] == fixed.capacity == 3  # nothing tuned, nothing paid


def consuming(q, taken, pause):
    """A started thread that takes each element's one number into ``taken``, pausing after each, until the queue
    is closed and drained."""

    def consume():
        while True:
            try:
                taken.append(int(q.get()[0][0]))
            except tq.QueueClosed:
                return
            time.sleep(pause)

    consumer = threading.Thread(target=consume)
    consumer.start()
    return consumer


def test_the_depth_changes_under_a_running_feeder_and_nothing_is_lost_or_reordered():
    n = 400
    q = tq.Queue([("i", "int64", (1,))], capacity="auto", memory_budget=1 << 20, target="cpu")
    tuner = q._auto
    tuner.stop()  # driven by hand below, with made-up windows, while the elements flow
    taken = []
    feeder = tq.Feeder(q, (np.arange(n),))
    # slower than the gather: the ring fills, and each change finds it in use
    consumer = consuming(q, taken, pause=0.0005)
    moves = [window(0.3, 0.2), window(0.1, 0.1), window(0.0, 0.9, fill=8.0), window(0.0, 0.9, fill=7.0)] * 5
    with feeder:
        for w in moves:
            tuner.step(w)
            time.sleep(0.005)
        consumer.join(30)
    assert taken == list(range(n))
    history = q.port.auto.as_dict()["history"]
    assert {h[1] for h in history} == {"capacity"} and len(history) >= 3
    assert {h[3] for h in history} >= {4, 8}


def test_the_tuner_thread_runs_on_its_own_and_ends_with_the_queue():
    q = tq.Queue([("x", "float32", (4,))], capacity="auto", target="cpu")
    tuner = q._auto
    tuner.interval = 0.01
    for _ in range(20):
        q.put(np.zeros(4, "float32"), timeout=5) if q.size() < q.capacity else q.get()
    del q
    tuner._thread.join(5)
    assert not tuner._thread.is_alive()


def test_auto_capacity_snapshot_is_none_once_the_port_is_gone():
    q = tq.Queue([("x", "float32", (4,))], capacity=2, target="cpu")
    tuner = AutoCapacity(q.port, slots=2)
    assert tuner.snapshot()["gather_busy_s"] is None
    del q
    import gc

    gc.collect()
    assert tuner.snapshot() is None


def test_a_bursty_producer_grows_the_ring_by_itself_and_every_element_arrives_in_order():
    """The tuner's own thread, on real measures: a producer that puts eight at once then pauses outruns a steady
    model in bursts; the ring grows, and the elements arrive once each, in order."""
    q = tq.Queue([("i", "int64", (1,))], capacity="auto", memory_budget=1 << 20, target="cpu")
    q._auto.interval = 0.1
    taken, produced = [], [0]
    consumer = consuming(q, taken, pause=0.004)
    for _burst in range(150):  # ends early once the ring grew: no clock decides the test
        for _ in range(8):
            q.put(np.array([produced[0]]))
            produced[0] += 1
        time.sleep(0.05)
        if q.capacity > 2 and _burst >= 10:
            break
    q.close()
    consumer.join(30)
    assert taken == list(range(produced[0]))
    history = q.port.auto.as_dict()["history"]
    assert any(new > old for _t, _k, old, new, _r in history), history


def test_a_shallow_ring_writes_only_its_first_slots():
    """The slots past the depth stay untouched (their pages out of memory) once the ring has been empty; a
    deeper ring then uses more of them."""
    q = tq.Queue([("x", "float32", (4,))], capacity="auto", memory_budget=1 << 20, target="cpu")
    q._auto.stop()
    assert q.capacity == 2 and q.stats()["slots"] == 16
    with q.trace(steps=20) as trace:
        for k in range(20):
            q.put(np.full(4, k, "float32"))
            if k % 2:
                q.get(), q.get()
    assert {e["slot"] for e in trace.elements} == {0, 1}
    q.port.ring.depth = 6
    with q.trace(steps=30) as trace:
        for k in range(5):
            for _ in range(6):
                q.put(np.zeros(4, "float32"))
            for _ in range(6):
                q.get()
    assert {e["slot"] for e in trace.elements} == set(range(6))


def test_a_gather_waiting_for_room_asks_its_share_of_the_depth_not_of_the_slots():
    """An array Feeder waits, once the ring is full, for half of the slots to be free (ArrayProducer.refill_room):
    on an auto ring of depth 4 out of 16 slots that is 2 elements taken, not 4 (which would leave the model an
    empty ring at every refill)."""
    from timing import scaled

    q = tq.Queue([("x", "float32", (1, 4))], capacity="auto", memory_budget=1 << 20, target="cpu")
    q._auto.stop()
    q.port.ring.depth = 4
    rows = np.arange(24, dtype="float32").reshape(6, 4)
    put = []
    writer = threading.Thread(
        target=lambda: put.append(q.port.ring.put_rows([rows], np.arange(6, dtype="int64"), 1, 0, 6, None, 8)),
        daemon=True,
    )
    writer.start()
    for _ in range(int(scaled(100))):
        if q.size() == 4:
            break
        time.sleep(0.1)
    assert q.size() == 4
    q.get(), q.get()  # two of the four: half of the depth, as 8 is half of the slots
    writer.join(scaled(10))
    assert put == [6] and q.size() == 4
    assert [float(q.get()[0][0][0]) for _ in range(4)] == [8.0, 12.0, 16.0, 20.0]


def test_a_slow_consumer_wakes_a_gather_waiting_for_its_share_of_the_depth():
    """The same share, asked of a consumer slower than the pace under which the Feeder looks by itself (one take
    every 400 us): its takes must wake the Feeder once 2 of the 4 are free.  The wake asked for 8 free slots of
    the 4 in use, so the Feeder slept until its wait's next slice (50 ms), and a 2 ms step found the ring
    empty at every refill."""
    from timing import scaled

    q = tq.Queue([("x", "float32", (1, 4))], capacity="auto", memory_budget=1 << 20, target="cpu")
    q._auto.stop()
    q.port.ring.depth = 4
    rows = np.arange(4000, dtype="float32").reshape(1000, 4)
    stop = _engine.Stop(q.port.ring)
    writer = threading.Thread(
        target=lambda: q.port.ring.put_rows([rows], np.arange(1000, dtype="int64"), 1, 0, 1000, stop, 8),
        daemon=True,
    )
    writer.start()
    refills, taken = [], []
    for _ in range(10):
        deadline = time.monotonic() + scaled(10)
        while q.size() < 4 and time.monotonic() < deadline:
            time.sleep(0.0002)
        began = time.monotonic()
        refills.append(began)
        for _ in range(2):
            time.sleep(0.002)  # a 2 ms step: too slow for the Feeder to look by itself
            taken.append(float(q.get()[0][0][0]))
        refills[-1] = time.monotonic()
        while q.size() < 4 and time.monotonic() < deadline:
            time.sleep(0.0002)
        refills[-1] = time.monotonic() - refills[-1]
    stop.set()
    writer.join(scaled(5))
    assert not writer.is_alive()
    assert np.median(refills) < scaled(0.015)  # woken by the take: well under the 50 ms slice
    assert taken == [4.0 * i for i in range(20)]


def test_a_deeper_limit_takes_effect_while_the_ring_is_never_empty():
    """A producer that always holds a slot (worker processes reserve ahead) never leaves the ring empty: the
    depth the tuner sets must still be the number of elements the ring holds, not the one it had at the start."""
    q = tq.Queue([("i", "int64", (1,))], capacity="auto", memory_budget=1 << 20, target="cpu")
    q._auto.stop()
    ring = q.port.ring
    held = ring.reserve(5.0)[0]  # a slot being written, as a worker's: the ring is not empty from here on
    q.put(np.array([0]))
    ring.depth = 6
    for k in range(1, 5):  # four more: six in the ring with the one being written and the first
        q.put(np.array([k]), timeout=2)
    with pytest.raises(tq.QueueTimeout):
        q.put(np.array([99]), timeout=0.05)
    ring.abort(held)  # the written slot given up: the others come in order
    assert [int(q.get(timeout=2)[0][0]) for _ in range(5)] == list(range(5))


def test_a_deeper_limit_on_a_ring_whose_elements_wrap_takes_effect_once_one_is_taken():
    q = tq.Queue([("i", "int64", (1,))], capacity="auto", memory_budget=1 << 20, target="cpu")
    q._auto.stop()
    q.put(np.array([0])), q.put(np.array([1]))
    assert int(q.get()[0][0]) == 0
    q.put(np.array([2]))  # the two elements wrap around the two slots in use
    q.port.ring.depth = 4
    assert int(q.get()[0][0]) == 1
    for k in (3, 4, 5):
        q.put(np.array([k]), timeout=2)
    with pytest.raises(tq.QueueTimeout):
        q.put(np.array([99]), timeout=0.05)
    assert [int(q.get(timeout=2)[0][0]) for _ in range(4)] == [2, 3, 4, 5]


def test_depth_changes_while_the_ring_is_in_use_keep_every_element_in_order_under_the_depth():
    """Depths up and down between puts and gets, the ring never drained on purpose: FIFO order, and no put
    leaves more in the ring than the depth at its time."""
    rng = np.random.default_rng(0)
    q = tq.Queue([("i", "int64", (1,))], capacity="auto", memory_budget=1 << 20, target="cpu")
    q._auto.stop()
    ring, slots = q.port.ring, q.stats()["slots"]
    put = got = 0
    for _ in range(3000):
        move = rng.integers(0, 10)
        if move == 0:
            ring.depth = int(rng.integers(1, slots + 1))
        elif move < 6:
            try:
                q.put(np.array([put]), timeout=0)
                put += 1
                assert put - got <= ring.depth
            except tq.QueueTimeout:
                pass
        elif put > got:
            assert int(q.get(timeout=2)[0][0]) == got
            got += 1
    assert put > 1000
    while got < put:
        assert int(q.get(timeout=2)[0][0]) == got
        got += 1
