"""One contract for every producer kind: the same values are taken or refused alike, with the same message.

Each case is a sample function (what a map-style dataset's ``dataset[i]``
returns); the other kinds are built from it: an iterable yields the samples
of a batch stacked (a list of rows for a variable-length component), an
array dataset holds every sample stacked, a fill function writes the batch
into the slot.  A refused value reaches the consumer as FeederError (or, for
an array dataset, whose arrays are checked whole, is raised when the Feeder is
made); at the root of either is the same class with the same message core,
and the queue takes the next epoch afterwards.
"""

import re

import numpy as np
import pytest

import theano_queue as tq

ROWS, SAMPLES = 4, 8
XY = [("x", "float32", (ROWS, 3)), ("y", "int32", (ROWS,))]
VARLEN = [("tokens", "int32", (ROWS, tq.upto(6))), ("y", "int32", (ROWS,))]
KINDS = ["iterable", "fill", "map", "map-workers", "arrays"]


def x_of(i):
    return np.full(3, i, "float32")


# name: (spec, sample(i), None for a good case else (exception class, message core regex))
CASES = {
    "good": (XY, lambda i: (x_of(i), np.int32(i)), None),
    "safe cast": (XY, lambda i: (x_of(i).astype("float16"), np.int16(i)), None),
    "python values": (XY, lambda i: ([float(i)] * 3, i), None),
    "unsafe cast": (
        XY,
        lambda i: (x_of(i), np.int64(i)),
        (
            TypeError,
            r"component 'y': expected dtype int32, got "
            r"int64, which does not cast safely to it",
        ),
    ),
    "python value too large": (
        XY,
        lambda i: (x_of(i), 2**40 + i),
        (TypeError, r"component 'y': expected (values that fit )?dtype int32"),
    ),
    "wrong shape": (XY, lambda i: (x_of(i)[:2], np.int32(i)), (ValueError, r"component 'x': expected .*shape")),
    "wrong count": (
        XY,
        lambda i: (x_of(i), np.int32(i), np.int32(i)),
        (ValueError, r"expected 2 components \(x, y\), got 3"),
    ),
    "bare array": (XY, lambda i: x_of(i), (ValueError, r"expected 2 components \(x, y\), got a bare array of shape")),
    "variable length": (VARLEN, lambda i: (np.arange(1 + i % 5, dtype="int16"), np.int32(i)), None),
    "variable length, unsafe cast": (
        VARLEN,
        lambda i: (np.arange(1 + i % 5, dtype="int64"), np.int32(i)),
        (
            TypeError,
            r"component 'tokens': expected dtype int32, got int64, which does "
            r"not cast safely to it",
        ),
    ),
}

# What a kind cannot be given, and why (checked below, not skipped silently).
NOT_APPLICABLE = {
    # A fill function writes into the slot's own views, which have the component's dtype and shape:
    # it has no value of its own to check (only its row count, test_a_fill_functions_rows_are_checked).
    ("fill", name)
    for name, (_, _, bad) in CASES.items()
    if bad is not None
} | {("arrays", "python values")}  # an array dataset is arrays: Python lists are no array dataset


class Samples:
    def __init__(self, sample):
        self.sample = sample

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return self.sample(i)


def stacked(values, component):
    if component.variable_axes or isinstance(values[0], (int, float, list)):
        return list(values)  # rows of their own lengths; Python values stay Python values
    return np.stack(values)


def batches(q, sample):
    out = []
    for first in range(0, SAMPLES, ROWS):
        samples = [sample(i) for i in range(first, first + ROWS)]
        if not isinstance(samples[0], tuple):
            out.append(np.stack(samples))  # a bare array stays bare
        elif len(samples[0]) != len(q.components):
            out.append(tuple(np.stack(values) for values in zip(*samples)))
        else:
            out.append(tuple(stacked(values, c) for values, c in zip(zip(*samples), q.components)))
    return out


def fill_function(q, sample):
    batch = iter(range(0, SAMPLES, ROWS))

    def fill(*views):
        first = next(batch)
        arrays, lengths = views[: len(q.components)], views[len(q.components) :]
        for r, i in enumerate(range(first, first + ROWS)):
            for j, (view, value) in enumerate(zip(arrays, sample(i))):
                value = np.asarray(value)
                if q.components[j].variable_axes:
                    view[r, : len(value)] = value
                    lengths[0][r] = len(value)
                else:
                    view[r] = value
        return ROWS

    return fill


def feeder(kind, q, sample):
    if kind == "iterable":
        return tq.Feeder(q, batches(q, sample))
    if kind == "fill":
        return tq.Feeder(q, fill=fill_function(q, sample))
    if kind in ("map", "map-workers"):
        return tq.Feeder(q, Samples(sample), workers=2 if kind == "map-workers" else 0)
    samples = [sample(i) for i in range(SAMPLES)]
    if not isinstance(samples[0], tuple):
        return tq.Feeder(q, np.stack(samples))  # a bare array: an iterable of its rows, as before
    return tq.Feeder(q, tuple(np.stack([np.asarray(v) for v in values]) for values in zip(*samples)))


def drain(q):
    got = []
    while True:
        try:
            got.append(q.get(timeout=30, lengths=q._layout.varying))
        except tq.QueueClosed:
            return got


def root(exc):
    while isinstance(exc, tq.FeederError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def outcome(kind, q, sample):
    """(elements taken, the root of the error or None)."""
    try:
        f = feeder(kind, q, sample)
    except (TypeError, ValueError) as exc:  # an array dataset's arrays are checked when the Feeder is made
        return [], exc
    got = []
    with f:
        try:
            got = drain(q)
        except tq.FeederError as exc:
            return got, root(exc)
    return got, None


def still_usable(q):
    q.close(cancel_pending=True)
    q.reopen()
    with tq.Feeder(q, Samples(CASES["good"][1] if not q._layout.varying else CASES["variable length"][1])):
        assert len(drain(q)) == SAMPLES // ROWS


def check_values(q, got, sample):
    assert len(got) == SAMPLES // ROWS
    for b, element in enumerate(got):
        for r in range(ROWS):
            want = sample(b * ROWS + r)
            if q._layout.varying:
                tokens, y, lengths = element
                assert tokens[r, : lengths[r]].tolist() == np.asarray(want[0]).tolist()
                assert y[r] == want[1]
            else:
                assert np.array_equal(element[0][r], np.asarray(want[0], "float32"))
                assert element[1][r] == want[1]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_producer_kind_takes_and_refuses_alike(kind, case):
    spec, sample, bad = CASES[case]
    if (kind, case) in NOT_APPLICABLE:
        return
    q = tq.Queue(spec, capacity=2, target="cpu")
    if kind == "arrays" and q._layout.varying:
        with pytest.raises(TypeError, match="variable \\(upto\\) axis"):  # rows of one shape cannot vary
            tq.Feeder(q, (np.zeros((SAMPLES, 6), "int32"), np.zeros(SAMPLES, "int32")))
        return
    got, error = outcome(kind, q, sample)
    if bad is None:
        assert error is None, "%s refused a good case: %r" % (kind, error)
        check_values(q, got, sample)
    else:
        cls, core = bad
        assert isinstance(error, cls), "%s: expected %s, got %r" % (kind, cls.__name__, error)
        assert re.search(core, str(error)), "%s: %r lacks %r" % (kind, str(error), core)
    still_usable(q)


def test_a_fill_functions_rows_are_checked():
    q = tq.Queue(XY, capacity=2, target="cpu")
    with tq.Feeder(q, fill=lambda x, y: ROWS + 1):
        with pytest.raises(tq.FeederError) as err:
            drain(q)
    assert "do not fit the components" in str(root(err.value))
    still_usable(q)
