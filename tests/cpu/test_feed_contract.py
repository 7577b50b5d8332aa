"""One contract for every producer kind: the same values are taken or refused alike, with the same message.

Each case is a sample function (what a map-style dataset's ``dataset[i]``
returns); the other kinds are built from it: an iterable yields the samples
of a batch stacked (a list of rows for a variable-length component), in the
Feeder's thread or in worker processes, ``q.put`` takes those batches, an
array dataset holds every sample stacked (gathered by the host or, held,
by the GPU: the upload stood in for as in tests/cpu/test_held.py), a fill
function writes the batch into the slot.  A refused value reaches the
consumer as FeederError (or, for ``q.put`` and an array dataset, whose arrays
are checked whole, is raised at once); at the root of either is the same
class with the same message, one wording per error, and the queue takes the
next epoch afterwards.  Device puts, which take device arrays of the exact
dtype only, are tests/standin/test_device_fake.py's.

The rule itself lives in one place (theano_queue/schema.py):
test_no_entry_casts_on_its_own replaces it with one that refuses everything,
and every kind given a value that needs a cast is refused by it.
"""

import re

import numpy as np
import pytest
from pretend import pretend_gpu

import theano_queue as tq
from theano_queue import schema
from theano_queue.feed import factory, held

ROWS, SAMPLES = 4, 8
XY = [("x", "float32", (ROWS, 3)), ("y", "int32", (ROWS,))]
VARLEN = [("tokens", "int32", (ROWS, tq.upto(6))), ("y", "int32", (ROWS,))]
KINDS = ["put", "iterable", "iterable-workers", "fill", "map", "map-workers", "arrays", "held"]


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
        (TypeError, r"component 'y': expected values that fit dtype int32; these int64 values do not"),
    ),
    "wrong shape": (XY, lambda i: (x_of(i)[:2], np.int32(i)), (ValueError, r"component 'x': expected .*shape")),
    "wrong count": (
        XY,
        lambda i: (x_of(i), np.int32(i), np.int32(i)),
        (ValueError, r"expected 2 components \(x, y\), got 3"),
    ),
    "bare array": (XY, lambda i: x_of(i), (ValueError, r"expected 2 components \(x, y\), got a bare array of shape")),
    "variable length": (VARLEN, lambda i: (np.arange(1 + i % 5, dtype="int16"), np.int32(i)), None),
    "variable length, python lists": (VARLEN, lambda i: (list(range(1 + i % 5)), i), None),
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
} | {
    # An array dataset is arrays: Python values are no array dataset (stacked, they are an int64 array).
    (kind, name)
    for kind in ("arrays", "held")
    for name in ("python values", "python value too large")
}


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


class Puts:
    """``q.put`` of each batch, as a Feeder's context: a refusal is raised by the put itself."""

    def __init__(self, q, batches):
        self.q, self.batches = q, batches

    def __enter__(self):
        try:
            for batch in self.batches:
                self.q.put(batch)
        finally:
            self.q.close()
        return self

    def __exit__(self, *exc):
        return False


def as_gpu_queue(q, monkeypatch):
    """A host queue passing for a GPU queue whose held arrays' upload is stood in for (tests/cpu/test_held.py)."""
    monkeypatch.setattr(held.HeldArrayProducer, "upload", lambda producer: None)
    monkeypatch.setattr(held.HeldArrayProducer, "gather_on_host", lambda producer: None)
    return pretend_gpu(q)


def feeder(kind, q, sample, monkeypatch=None):
    if kind == "put":
        return Puts(q, batches(q, sample))
    if kind in ("iterable", "iterable-workers"):
        return tq.Feeder(q, batches(q, sample), workers=2 if kind == "iterable-workers" else 0)
    if kind == "fill":
        return tq.Feeder(q, fill=fill_function(q, sample))
    if kind in ("map", "map-workers"):
        return tq.Feeder(q, Samples(sample), workers=2 if kind == "map-workers" else 0)
    samples = [sample(i) for i in range(SAMPLES)]
    if not isinstance(samples[0], tuple):
        return tq.Feeder(q, np.stack(samples))  # a bare array: an iterable of its rows, as before
    arrays = tuple(np.stack([np.asarray(v) for v in values]) for values in zip(*samples))
    if kind == "held":
        return tq.Feeder(as_gpu_queue(q, monkeypatch), arrays, device=True)
    return tq.Feeder(q, arrays)


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


def outcome(kind, q, sample, monkeypatch=None):
    """(elements taken, the root of the error or None)."""
    try:
        f = feeder(kind, q, sample, monkeypatch)
    except (TypeError, ValueError) as exc:  # an array dataset's arrays are checked when the Feeder is made
        return [], exc
    got = []
    try:
        with f:
            got = drain(q)
    except tq.FeederError as exc:
        return got, root(exc)
    except (TypeError, ValueError) as exc:  # q.put refuses at once
        return got, exc
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
def test_every_producer_kind_takes_and_refuses_alike(kind, case, monkeypatch):
    spec, sample, bad = CASES[case]
    if (kind, case) in NOT_APPLICABLE:
        return
    q = tq.Queue(spec, capacity=2 if kind != "put" else SAMPLES // ROWS, target="cpu")
    if kind in ("arrays", "held") and q._layout.varying:
        with pytest.raises(TypeError, match="variable \\(upto\\) axis"):  # rows of one shape cannot vary
            tq.Feeder(q, (np.zeros((SAMPLES, 6), "int32"), np.zeros(SAMPLES, "int32")))
        return
    got, error = outcome(kind, q, sample, monkeypatch)
    if bad is None:
        assert error is None, "%s refused a good case: %r" % (kind, error)
        check_values(q, got, sample)
    else:
        cls, core = bad
        assert isinstance(error, cls), "%s: expected %s, got %r" % (kind, cls.__name__, error)
        assert re.search(core, str(error)), "%s: %r lacks %r" % (kind, str(error), core)
        if "dtype" in core:  # the cast rule's one wording, whichever entry the value came through
            assert str(error).startswith("Queue '%s', component" % q.name), str(error)
        if case == "wrong shape" and kind in ("put", "iterable", "iterable-workers"):  # a batch's: one wording
            assert str(error) == "Queue.put: queue '%s', component 'x': expected shape (<=4, 3), got (4, 2)" % q.name
    still_usable(q)


# Cases whose values need the rule: a cast, Python values, variable-length rows of another dtype or as lists.
NEEDS_THE_RULE = ["safe cast", "python values", "variable length", "variable length, python lists"]


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "fill"])
@pytest.mark.parametrize("case", NEEDS_THE_RULE)
def test_no_entry_casts_on_its_own(kind, case, monkeypatch):
    spec, sample, _ = CASES[case]
    if (kind, case) in NOT_APPLICABLE or (kind in ("arrays", "held") and case.startswith("variable")):
        return
    asked = []

    def refusing(component, value, queue_name):
        asked.append(component.name)
        raise TypeError("Queue %r, component %r: refused by the stand-in rule" % (queue_name, component.name))

    monkeypatch.setattr(schema, "component_value", refusing)
    q = tq.Queue(spec, capacity=2 if kind != "put" else SAMPLES // ROWS, target="cpu")
    got, error = outcome(kind, q, sample, monkeypatch)
    if kind in ("iterable-workers", "map-workers"):
        # The workers' processes import the real rule: what matters here is that nothing went in unchecked.
        assert error is None or "refused by the stand-in rule" in str(error)
        return
    assert isinstance(error, TypeError) and "refused by the stand-in rule" in str(error), (kind, error)
    assert asked and not got


def test_a_fill_functions_rows_are_checked():
    q = tq.Queue(XY, capacity=2, target="cpu")
    with tq.Feeder(q, fill=lambda x, y: ROWS + 1):
        with pytest.raises(tq.FeederError) as err:
            drain(q)
    assert "do not fit the components" in str(root(err.value))
    still_usable(q)


@pytest.mark.parametrize("source, runner", sorted(factory.REFUSED))
def test_a_refused_source_and_runner_pair_says_why(source, runner):
    q = tq.Queue(XY, capacity=2, target="cpu")
    arrays = (np.zeros((SAMPLES, 3), "float32"), np.zeros(SAMPLES, "int32"))
    given = {
        "fill": ((), {"fill": lambda x, y: ROWS}),
        "arrays": ((arrays,), {}),
        "held arrays": ((arrays,), {"device": True}),
    }
    args, kwargs = given[source]
    assert runner == "workers"  # the only runner a source can be refused: the others are each source's own
    with pytest.raises(TypeError) as err:
        tq.Feeder(q, *args, workers=2, **kwargs)
    assert str(err.value) == "Feeder(%s): %s" % (q.name, factory.REFUSED[source, runner])
    if source != "held arrays":  # its own runner is allowed (a held dataset's needs a GPU: tests/cpu/test_held.py)
        with tq.Feeder(q, *args, **kwargs):
            pass
