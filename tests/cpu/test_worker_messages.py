"""Messages that name the real cause (issue 27, item 4), and arguments refused naming the parameter."""

import math

import numpy as np
import pytest
from worker_datasets import Tagged

import theano_queue as tq
from theano_queue import _engine

WIDE = [("x", "float32", (32, 5, 3)), ("y", "int64", (32,))]


def test_a_timeout_names_the_sample_that_hangs_not_the_first_of_the_batch():
    q = tq.Queue(WIDE, capacity=2, target="cpu", timeout=30)
    with tq.Feeder(q, Tagged(128, slow={45}, slow_s=60), workers=1, timeout=1):
        q.get(timeout=30)  # batch 0: rows 0-31
        with pytest.raises(tq.FeederError) as info:
            q.get(timeout=30)
    message = str(info.value)
    assert "did not finish sample 45 (13 of its 32 sample(s) [32, 33, 34, ... 63] of batch 1 of epoch 0 done" in message


@pytest.mark.parametrize("bad", [True, "30", [1]])
def test_set_stall_warning_takes_seconds_or_none_only(bad):
    previous = tq.set_stall_warning(30.0)
    try:
        with pytest.raises(TypeError, match=r"set_stall_warning: expected seconds \(a number >= 0\) or None"):
            tq.set_stall_warning(bad)
        assert tq.set_stall_warning(np.float64(2.5)) == 30.0
    finally:
        tq.set_stall_warning(previous)


def test_device_true_with_a_timeout_does_not_advise_workers():
    q = tq.Queue([("x", "float32", (4, 2))], capacity=2, target="cpu")
    with pytest.raises(ValueError, match="device=True") as info:
        tq.Feeder(q, (np.zeros((8, 2), "float32"),), device=True, timeout=2)
    assert "workers >= 1" not in str(info.value) and "workers>=1" not in str(info.value)


@pytest.mark.parametrize(
    "call, expected",
    [
        (
            lambda: tq.Queue([("x", "float32", (4,))], timeout="1"),
            "Queue: queue '.*': timeout must be None or a number",
        ),
        (lambda: tq.Queue([("x", "float32", (4,))], target="cpu").get(timeout="1"), "Queue.get: queue .*: timeout"),
        (
            lambda: tq.Queue([("x", "float32", (4,))], target="cpu").put(np.zeros(4, "float32"), timeout=True),
            "Queue.put: queue .*: timeout must be None or a number of seconds >= 0",
        ),
        (lambda: _engine.set_copy_threads(2.5), "set_copy_threads: expected an int number of threads >= 1, got 2.5"),
    ],
)
def test_raw_type_errors_name_the_call_and_parameter(call, expected):
    with pytest.raises(TypeError, match=expected):
        call()


@pytest.mark.parametrize("bad", ["x", -1, math.nan, (1, 2)])
def test_stop_timeout_is_checked(bad):
    q = tq.Queue([("x", "float32", (4,))], capacity=2, target="cpu")
    with pytest.raises(ValueError, match=r"Feeder\(.*\): stop_timeout must be a number of seconds >= 0"):
        tq.Feeder(q, [np.zeros(4, "float32")], stop_timeout=bad)


class _Samples:
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return (np.full(4, i, "float32"),)


BAD = ["x", 2.5, True, -1, math.nan, math.inf, (1, 2), [0.5], {"a": 1}, b"\x00", np.array([0, 1])]
ARGUMENTS = ["workers", "seed", "shard", "epochs", "stop_timeout", "timeout", "bucket_window", "start_method", "state"]
ARGUMENTS += ["shuffle", "drop_last", "ordered"]


@pytest.mark.parametrize("argument", ARGUMENTS)
@pytest.mark.parametrize("dataset", ["map", "iterable", "arrays"])
def test_every_bad_feeder_argument_is_refused_naming_the_feeder(argument, dataset):
    """A small fuzz: whatever a bad value does, a refusal names the Feeder (no raw Python message)."""
    sources = {
        "map": _Samples(),
        "iterable": [np.zeros((8, 4), "float32")] * 2,
        "arrays": (np.zeros((16, 4), "float32"),),
    }
    for value in BAD:
        q = tq.Queue([("x", "float32", (8, 4))], capacity=2, target="cpu")
        try:
            feeder = tq.Feeder(q, sources[dataset], **{argument: value})
        except (TypeError, ValueError) as exc:
            assert str(exc).startswith("Feeder(%s)" % q.name), (argument, value, str(exc))
        else:
            feeder.close()


@pytest.mark.parametrize("value", ["x", True, -1, math.nan, (1, 2), [0.5], {"a": 1}, b"\x00"])
def test_every_bad_queue_timeout_is_refused_naming_the_queue(value):
    for call in (
        lambda: tq.Queue([("x", "float32", (4,))], timeout=value),
        lambda: tq.Queue([("x", "float32", (4,))], target="cpu").get(timeout=value),
        lambda: tq.Queue([("x", "float32", (4,))], target="cpu").put(np.zeros(4, "float32"), timeout=value),
    ):
        with pytest.raises((TypeError, ValueError), match="^Queue"):
            call()


@pytest.mark.parametrize("limit", [10**12, 1e300])
def test_a_stop_timeout_beyond_what_a_lock_can_count_means_no_limit(limit):
    q = tq.Queue([("x", "float32", (4,))], capacity=2, target="cpu")
    with tq.Feeder(q, [np.zeros(4, "float32")] * 3, stop_timeout=limit) as feeder:
        q.get(timeout=5)
    assert not feeder.running and feeder.exception is None
