"""One owner of a queue's run (issue 40 point 2, issue 42 point 2): a reopen never mixes epochs, Feeders started
one after the other for one epoch never race, and messages name Feeders apart.  No timed assertion: the sources
block on events, and every wait is a bound that only stops a hung test."""

import threading

import numpy as np
import pytest
from timing import scaled
from worker_datasets import ROWS, SPEC, Tagged

import theano_queue as tq
from theano_queue.feed.state import NotExact

X = [("x", "int64", (4,))]


def batches(n, tag):
    """n batches whose every value is tag * 1000 + i: the tag says which run (epoch) put them."""
    return [np.full(4, tag * 1000 + i, "int64") for i in range(n)]


def endless(tag, made=None):
    """An endless generator of tagged batches; made (an Event) is set once the first is made."""
    i = 0
    while True:
        yield np.full(4, tag * 1000 + i, "int64")
        if made is not None:
            made.set()
        i += 1


def drain(q):
    """Every value taken until QueueClosed (a QueueTimeout here is a hang)."""
    got = []
    while True:
        try:
            got.append(int(q.get(timeout=scaled(20))[0][0]))
        except tq.QueueClosed:
            return got


# ---- a reopen while a Feeder runs ---------------------------------------------------------------------


@pytest.mark.parametrize("taken", [0, 1])
def test_a_reopen_while_a_feeder_runs_stops_it_and_drops_what_it_queued(taken):
    q = tq.Queue(X, capacity=2, target="cpu")
    made = threading.Event()
    old = tq.Feeder(q, endless(0, made)).start()
    assert made.wait(scaled(20))
    for _ in range(taken):
        q.get(timeout=scaled(20))
    q.reopen()  # the next epoch starts now: the old run is over
    assert not old.running and not q.closed and q.size() == 0
    with tq.Feeder(q, batches(5, 1)):
        got = drain(q)
    assert got == [1000, 1001, 1002, 1003, 1004], "elements of the old run reached the new epoch"


def test_a_reopen_while_worker_processes_feed_stops_them_and_no_old_sample_arrives():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    old = tq.Feeder(q, Tagged(4000, slow="all", slow_s=0.002), workers=2).start()
    q.get(timeout=scaled(60))
    q.reopen()
    assert not old.running and q.size() == 0
    mine = np.full(ROWS, -7, "int64")
    with tq.Feeder(q, [(np.zeros((ROWS, 5, 3), "float32"), mine)] * 3):
        got = []
        while True:
            try:
                got.append(q.get(timeout=scaled(20))[1].tolist())
            except tq.QueueClosed:
                break
    assert got == [mine.tolist()] * 3


def test_a_reopen_whose_feeder_cannot_stop_refuses_and_the_old_run_never_lands():
    q = tq.Queue(X, capacity=2, target="cpu")
    entered, release = threading.Event(), threading.Event()

    def stuck():
        yield np.full(4, 0, "int64")
        entered.set()
        release.wait(scaled(60))  # blocked inside next(): stop() cannot reach it
        yield np.full(4, 1, "int64")

    old = tq.Feeder(q, stuck(), stop_timeout=0.2).start()
    assert entered.wait(scaled(20))
    with pytest.raises(tq.QueueError, match=r"cannot reopen while Feeder\(.*\) still runs.*call q.reopen\(\) again"):
        q.reopen()
    assert q.closed and q.size() == 0  # refused: the queue stays closed, what was queued is gone
    release.set()
    assert old.join(scaled(20))
    q.reopen()
    with tq.Feeder(q, batches(3, 1)):
        assert drain(q) == [1000, 1001, 1002]


def test_a_reopen_of_a_queue_a_finished_feeder_left_elements_in_says_so():
    q = tq.Queue(X, capacity=4, target="cpu")
    tq.Feeder(q, batches(3, 0), close_when_done=False).start().join(scaled(20))
    with pytest.raises(tq.QueueError, match="still holds 3 element"):
        q.reopen()  # its run ended on its own, in no with block: refused rather than mixed or dropped unasked
    assert q.size() == 3


def test_a_reopen_without_a_feeder_leaves_elements_put_by_hand_alone():
    q = tq.Queue(X, capacity=4, target="cpu")
    q.put(np.zeros(4, "int64"))
    q.reopen()  # open, never fed by a Feeder: nothing to end
    assert q.size() == 1 and not q.closed


# ---- Feeders started one after the other for one epoch -------------------------------------------------


@pytest.mark.parametrize("first_done", [False, True], ids=["started at once", "first done before second"])
def test_two_feeders_started_in_sequence_feed_one_epoch_exactly_once(first_done):
    for trial in range(20):
        q = tq.Queue(X, capacity=8, target="cpu")
        first = tq.Feeder(q, batches(1 + trial % 3, 0)).start()
        if first_done:
            assert first.join(scaled(20))  # it ran out and closed the queue: the consumer has not seen that end
        second = tq.Feeder(q, batches(3, 1)).start()
        got = drain(q)
        assert sorted(got) == list(range(1 + trial % 3)) + [1000, 1001, 1002], (trial, got)
        first.close()
        second.close()


def test_nested_with_blocks_of_short_feeders_feed_one_epoch():
    for trial in range(20):
        q = tq.Queue(X, capacity=2, target="cpu")
        with tq.Feeder(q, batches(1, 0)), tq.Feeder(q, batches(2, 1)), tq.Feeder(q, batches(1, 2)):
            got = drain(q)
        assert sorted(got) == [0, 1000, 1001, 2000], (trial, got)
        q.reopen()


def test_a_feeder_with_workers_joins_a_run_its_predecessor_closed():
    q = tq.Queue(SPEC, capacity=4, target="cpu")
    first = tq.Feeder(q, Tagged(8)).start()
    assert first.join(scaled(20))
    with tq.Feeder(q, Tagged(16), workers=1):
        got = []
        while True:
            try:
                got.extend(q.get(timeout=scaled(60))[1].tolist())
            except tq.QueueClosed:
                break
    assert sorted(got) == sorted(list(range(8)) + list(range(16)))


def test_a_feeder_started_after_the_consumer_saw_the_end_says_to_reopen():
    q = tq.Queue(X, capacity=8, target="cpu")
    tq.Feeder(q, batches(2, 0)).start()
    assert drain(q) == [0, 1]  # the consumer reached the end of the epoch
    with pytest.raises(tq.QueueClosed, match=r"call q.reopen\(\) before starting the next epoch's Feeder"):
        tq.Feeder(q, batches(2, 1)).start()
    q.reopen()
    with tq.Feeder(q, batches(2, 1)):
        assert drain(q) == [1000, 1001]


def test_a_queue_the_user_closed_takes_no_feeder_until_reopened():
    q = tq.Queue(X, capacity=8, target="cpu")
    tq.Feeder(q, batches(2, 0)).start().join(scaled(20))
    q.close()  # the user ends the epoch, whatever the Feeders did
    with pytest.raises(tq.QueueClosed, match="reopen"):
        tq.Feeder(q, batches(2, 1)).start()
    assert drain(q) == [0, 1]


def test_a_feeder_left_by_its_with_block_ends_the_epoch_for_the_next_one():
    q = tq.Queue(X, capacity=8, target="cpu")
    with tq.Feeder(q, batches(2, 0)) as first:
        assert first.join(scaled(20))
    with pytest.raises(tq.QueueClosed, match="reopen"):
        tq.Feeder(q, batches(2, 1)).start()
    q.reopen()  # drops what the block left
    with tq.Feeder(q, batches(1, 1)):
        assert drain(q) == [1000]


# ---- Feeders named apart -------------------------------------------------------------------------------


def test_default_names_are_unique_per_queue():
    q, other = tq.Queue(X, target="cpu", name="q"), tq.Queue(X, target="cpu", name="other")
    names = [tq.Feeder(q, batches(1, 0)).name for _ in range(3)] + [tq.Feeder(other, batches(1, 0)).name]
    assert names == ["Feeder(q)", "Feeder(q)#2", "Feeder(q)#3", "Feeder(other)"]


@pytest.mark.parametrize("named", [None, "loader"])
def test_not_exact_names_the_other_feeder_never_itself(named):
    q = tq.Queue(X, capacity=2, target="cpu", name="q")
    made = threading.Event()
    with tq.Feeder(q, endless(0, made), name=named) as first, tq.Feeder(q, endless(1), name=named) as second:
        assert made.wait(scaled(20))
        for feeder, other in ((first, second), (second, first)):
            with pytest.raises(NotExact) as err:
                feeder.state_dict()
            message = str(err.value)
            head, why = message.split(": cannot be exact: ")
            assert head == feeder.name + ".state_dict()"
            if named is None:
                assert feeder.name != other.name and why.startswith(other.name + " also fed queue 'q'"), message
            else:
                assert why.startswith("another Feeder named 'loader' also fed queue 'q'"), message
        q.close(cancel_pending=True)
