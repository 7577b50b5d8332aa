"""Exact states, or a refusal saying why (issue 27, item 3): two Feeders on one queue, and every saved field
checked against the run it resumes."""

import types

import numpy as np
import pytest
from worker_datasets import SPEC, Tagged

import theano_queue as tq
from theano_queue.feed.state import NotExact

ONE = [("x", "float32", (4,))]


def batches(n, base=0):
    return [np.full(4, base + i, "float32") for i in range(n)]


def test_one_of_two_feeders_on_a_queue_refuses_a_state_that_would_overcount():
    q = tq.Queue(ONE, capacity=4, target="cpu")
    a = tq.Feeder(q, batches(20), name="A").start()
    b = tq.Feeder(q, batches(20, 100), name="B").start()
    got = [q.get(timeout=20)[0][0] for _ in range(10)]
    assert len(got) == 10
    for feeder, other in ((a, "B"), (b, "A")):
        with pytest.raises(
            NotExact, match=r"%s.state_dict\(\): cannot be exact: %s also fed queue" % (feeder.name, other)
        ):
            feeder.state_dict()
    a.close()
    b.close()


def test_a_q_put_during_a_run_makes_the_state_refuse():
    q = tq.Queue(SPEC, capacity=8, target="cpu")
    # More batches than the queue holds: the run is still going (and the queue open) at the second put.
    feeder = tq.Feeder(q, Tagged(8 * 40), name="solo")
    q.put(np.zeros((8, 5, 3), "float32"), np.zeros(8, "int64"))  # before start: not this run's
    with feeder:
        q.get(timeout=20)
        q.get(timeout=20)
        feeder.state_dict()  # its own elements only, so far: exact
        q.put(np.zeros((8, 5, 3), "float32"), np.zeros(8, "int64"))
        with pytest.raises(NotExact, match="1 element\\(s\\) put into the queue during this run came from elsewhere"):
            feeder.state_dict()


def test_an_iterable_state_past_the_run_is_refused_with_what_would_be_right():
    q = tq.Queue(ONE, capacity=2, target="cpu")
    for consumed in (25, 10**9):
        with pytest.raises(
            ValueError,
            match=r"(?s)lies past this run's end.*\n  stream 0: consumed=%d, but this "
            r"run gives it 20 element\(s\): at most 20" % consumed,
        ):
            tq.Feeder(q, batches(20), state={"version": 1, "kind": "iterable", "consumed": [consumed]})
    with pytest.raises(ValueError, match=r"stream 1: consumed=11, but this run gives it 10"):
        tq.Feeder(q, batches(10), workers=2, epochs=2, state={"version": 1, "kind": "iterable", "consumed": [5, 11]})
    resumed = tq.Feeder(q, batches(20), state={"version": 1, "kind": "iterable", "consumed": [20]})
    assert resumed.state_dict()["consumed"] == [20]  # the end itself is a position of the run


def test_any_mapping_is_a_state_and_shard_is_any_integer_pair():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Tagged(64), shard=np.array([0, 2])) as feeder:
        q.get(timeout=20)
        saved = feeder.state_dict()
    saved["shard"] = np.array(saved["shard"])
    resumed = tq.Feeder(q, Tagged(64), shard=(np.int64(0), 2), state=types.MappingProxyType(saved))
    assert resumed.state_dict()["position"] == 1
    iterable = types.MappingProxyType({"version": 1, "kind": "iterable", "consumed": [3]})
    assert tq.Feeder(tq.Queue(ONE, target="cpu"), batches(5), state=iterable).state_dict()["consumed"] == [3]


def test_each_wrong_setting_gets_a_line_saying_what_would_resume_it():
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    saved = tq.Feeder(q, Tagged(64), shard=(1, 2), seed=3, shuffle=True).state_dict()
    with pytest.raises(ValueError) as info:
        tq.Feeder(q, Tagged(60), shard=(0, 2), seed=4, shuffle=True, state=saved)
    lines = str(info.value).splitlines()
    assert (
        "  length: saved 64, this Feeder has 60 (resume it over the dataset it was saved from, of 64 samples)" in lines
    )
    assert "  shard: saved [1, 2], this Feeder has [0, 2] (give shard=(1, 2))" in lines
    assert "  seed: saved 3, this Feeder has 4 (give seed=3)" in lines
    with pytest.raises(ValueError, match="it is a list, not a mapping"):
        tq.Feeder(q, Tagged(64), state=[1])


def test_an_iterable_run_in_the_feeders_thread_refuses_a_state_after_a_q_put():
    # The in-thread iterable keeps the same schedule as the worker pool's: keys logged before each commit, so a
    # foreign put is caught, not counted as one of its own.
    q = tq.Queue(ONE, capacity=8, target="cpu")
    feeder = tq.Feeder(q, batches(3), name="solo", close_when_done=False).start()
    assert q.get(timeout=20)[0][0] == 0
    assert feeder.join(20)
    assert feeder.state_dict()["consumed"] == [1]
    q.put(np.full(4, -1, "float32"), timeout=20)
    with pytest.raises(NotExact, match="1 element\\(s\\) put into the queue during this run came from elsewhere"):
        feeder.state_dict()


def test_an_iterable_state_counts_only_what_was_taken_not_what_failed_to_go_in():
    # A batch the queue refused is not a position of the run: the state still resumes at the refused batch.
    q = tq.Queue(ONE, capacity=4, target="cpu")
    good = batches(3)
    feeder = tq.Feeder(q, good + [np.zeros(5, "float32")], name="bad", close_when_done=False).start()
    feeder.join(20)
    assert isinstance(feeder.exception, ValueError)
    for _ in range(3):
        q.get(timeout=20)
    assert feeder.state_dict()["consumed"] == [3]
