"""Messages that name the fix for the client at hand (issue 41.4): the array dataset's tuple, and the dequeued
variables named after their components (Keras's message about a uint8 input then names it: test_keras.py)."""

import numpy as np
import pytest

import theano_queue as tq


def test_a_list_of_arrays_with_shuffle_says_to_pass_a_tuple():
    q = tq.Queue([("x", "float32", (8, 3)), ("y", "int32", (8,))], target="cpu")
    x, y = np.zeros((40, 3), "float32"), np.zeros(40, "int32")
    for arguments in (dict(shuffle=True), dict(shard=(0, 2)), dict(drop_last=True)):
        with pytest.raises(ValueError, match=r"a list of 2 arrays .*pass a tuple \(X, y\) for an array dataset") as e:
            tq.Feeder(q, [x, y], **arguments)
        assert "worker_info" not in str(e.value)
    # The tuple it names works, and a list of batches keeps its own advice.
    with tq.Feeder(q, (x, y), shuffle=True):
        assert q.get()[0].shape == (8, 3)
    q.close(cancel_pending=True)
    q.reopen()
    with pytest.raises(ValueError, match=r"an iterable yields whole batches.*tq\.worker_info\(\)"):
        tq.Feeder(q, [(x[:8], y[:8])], shuffle=True)


def test_a_bare_array_with_shuffle_says_to_pass_a_one_array_tuple():
    """A one-component queue fed one array: a newcomer's first try.  A bare array is an iterable of batches;
    with shuffle the message names the tuple that makes it an array dataset, and that tuple works."""
    q = tq.Queue([("x", "float32", (8, 1))], target="cpu")
    x = np.arange(40, dtype="float32").reshape(40, 1)
    for arguments in (dict(shuffle=True), dict(shard=(0, 2)), dict(drop_last=True)):
        with pytest.raises(ValueError, match=r"a numpy array alone .*pass a tuple \(X,\) for an array dataset") as e:
            tq.Feeder(q, x, **arguments)
        assert "worker_info" not in str(e.value)
    with tq.Feeder(q, (x,), shuffle=True):
        (got,) = q.get()
        assert got.shape == (8, 1) and set(got.ravel()) <= set(x.ravel())
    q.close(cancel_pending=True)


def test_dequeued_variables_are_named_after_their_components():
    q = tq.Queue([("image", "uint8", (4, 2, 2)), ("label", "int32", (4,))], target="cpu")
    assert [v.name for v in q.dequeue()] == ["image", "label"]
    one = tq.Queue([("x", "float32", (4, 3))], target="cpu")
    assert one.dequeue().name == "x"
    varlen = tq.Queue([("tokens", "int32", (4, tq.upto(6))), ("y", "int32", (4,))], target="cpu")
    assert [v.name for v in varlen.dequeue(lengths=True)] == ["tokens", "y", "tokens_lengths"]
