"""What Queue() refuses at construction, before anything is allocated, with the argument's name."""

import numpy as np
import pytest

import theano_queue as tq
from theano_queue.core import spec


@pytest.mark.parametrize(
    "dtype, message",
    [
        ("float128", "got float128"),
        (">f4", "in the machine's byte order .* got >f4"),
        ("S4", "got |S4"),
        ("U3", "got <U3"),
        ("datetime64[s]", r"got datetime64\[s\]"),
        ("timedelta64", "got timedelta64"),
        ("V8", "got |V8"),
        ("O", "got object"),
        ([("a", "f4")], "got"),
        (None, "dtype=None; give the dtype"),
    ],
)
def test_dtypes_theano_cannot_hold_are_refused(dtype, message):
    with pytest.raises(TypeError, match="Queue 'bad', component 'x': .*" + message.replace("|", r"\|")):
        tq.Queue([("x", dtype, (4,))], target="cpu", name="bad")


def test_every_theano_dtype_is_taken():
    for dtype in spec.THEANO_DTYPES:
        q = tq.Queue([("x", dtype, (2,))], target="cpu")
        q.put(np.ones(2, dtype))
        assert q.get()[0].dtype == np.dtype(dtype)


def test_sizes_no_memory_holds_are_refused():
    with pytest.raises(ValueError, match="Queue 'big', component 'x': shape .* no memory holds that"):
        tq.Queue([("x", "float32", (1, 2**32, 2**32))], target="cpu", name="big")
    with pytest.raises(ValueError, match=r"Queue 'ring': 4096 slots .* component 'x'.* of host memory"):
        tq.Queue([("x", "uint8", (1024, 1024, 1024))], capacity=4096, target="cpu", name="ring")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(capacity=2**31), ValueError, 'capacity must be an int from 1 to 4096 or "auto", got 2147483648'),
        (dict(capacity=0), ValueError, 'capacity must be an int from 1 to 4096 or "auto", got 0'),
        (dict(capacity=2.0), ValueError, "capacity must be an int"),
        (dict(name=123), TypeError, "name must be a str, got 123"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, error, message):
    with pytest.raises(error, match=message):
        tq.Queue([("x", "float32", (2,))], target="cpu", **kwargs)


@pytest.mark.parametrize(
    "shape, error, message",
    [
        (None, TypeError, "shape must be a tuple of ints.* got None"),
        ("12", TypeError, "shape must be a tuple of ints"),
        ((2, -1), ValueError, "non-negative ints"),
        ((2, 1.5), ValueError, "non-negative ints"),
        ((1,) * 33, ValueError, "at most 32 dimensions"),
    ],
)
def test_bad_shapes_name_the_component(shape, error, message):
    with pytest.raises(error, match="component 'x': .*" + message):
        tq.Queue([("x", "float32", shape)], target="cpu")


@pytest.mark.parametrize(
    "broadcastable, error, message",
    [
        (
            {"x": (0,)},
            ValueError,
            r"component 'x': only a fixed axis of length 1 after the leading one can "
            r"broadcast; axis 0 of shape \(50, 1, 28\) cannot",
        ),
        ({"x": (2,)}, ValueError, "axis 2 of shape"),
        ({"x": (3,)}, ValueError, "axis 3 of shape"),
        ({"z": (1,)}, ValueError, "broadcastable names 'z', which is no component"),
        ({"x": "1"}, TypeError, "component 'x': broadcastable axes must be a tuple of ints"),
        ((1,), TypeError, r"broadcastable must map component names to axes, e.g. \{'x': \(1,\)\}"),
    ],
)
def test_broadcastable_axes_are_checked(broadcastable, error, message):
    with pytest.raises(error, match="Queue 'bad'.*" + message):
        tq.Queue([("x", "float32", (50, 1, 28))], target="cpu", name="bad", broadcastable=broadcastable)


def test_no_axis_broadcasts_unless_declared():
    q = tq.Queue([("x", "float32", (50, 1, 28)), ("t", "int32", (4, tq.upto(1)))], target="cpu", broadcastable={"x": 1})
    assert q.components[0].broadcastable == (False, True, False)
    assert q.components[1].broadcastable == (False, False)
    assert tq.Queue([("x", "float32", (50, 1, 1))], target="cpu").components[0].broadcastable == (False,) * 3
