"""The feed contract's cases, shared by tests/cpu/test_feed_contract.py (every host entry and graph enqueues) and
tests/standin/test_device_contract.py (device puts, against the stand-in CUDA driver): the same values, the same
outcome, one wording per error.

Each case is a sample function (what a map-style dataset's ``dataset[i]``
returns); each kind builds what it is given from it.  :data:`MESSAGES` holds
the exact text of every refusal, with ``{q}`` for the queue's name: by the
form the value came in (a batch, a sample of a map-style dataset, the whole
arrays of an array dataset), never by the entry.
"""

import numpy as np

import theano_queue as tq

ROWS, SAMPLES = 4, 8
XY = [("x", "float32", (ROWS, 3)), ("y", "int32", (ROWS,))]
VARLEN = [("tokens", "int32", (ROWS, tq.upto(6))), ("y", "int32", (ROWS,))]
WIDE = [("x", "float32", (ROWS, 3)), ("y", "int64", (ROWS,))]
UNSIGNED = [("x", "float32", (ROWS, 3)), ("y", "uint64", (ROWS,))]
#: The producer kinds: q.put; an iterable in the Feeder's thread or in workers; a fill function; a map-style
#: dataset inline or in workers; an array dataset gathered on the host or held (the upload stood in for);
#: a compiled graph's Enqueue; device arrays put into a GPU queue (the stand-in driver's).
KINDS = ["put", "iterable", "iterable-workers", "fill", "map", "map-workers", "arrays", "held", "graph", "device"]


def x_of(i):
    return np.full(3, i, "float32")


def one_row_short(sample):
    """``sample`` whose batches (and array dataset) lose the last row of their last component: rows that differ.

    A sample is one row of every component, so a map-style dataset cannot give rows that differ; the kinds
    that take whole batches or whole arrays are given them cut (see :func:`batches`).
    """
    sample.cut = lambda values: tuple(values[:-1]) + (values[-1][:-1],)
    return sample


def nan_label(i):
    """Labels of float64 with a NaN in every batch (the second row's): a sample of its own is NaN or not."""
    return x_of(i), np.float64(np.nan if i % ROWS == 1 else i)


# name: (spec, sample(i), None for a good case else (exception class, message core regex))
CASES = {
    "good": (XY, lambda i: (x_of(i), np.int32(i)), None),
    "safe cast": (XY, lambda i: (x_of(i).astype("float16"), np.int16(i)), None),
    "python values": (XY, lambda i: ([float(i)] * 3, i), None),
    "unsafe cast": (
        XY,
        lambda i: (x_of(i), np.int64(i)),
        (TypeError, r"component 'y': expected dtype int32, got int64, which does not cast safely to it"),
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
    "bare array": (XY, lambda i: x_of(i), (ValueError, r"expected 2 components \(x, y\), got a bare")),
    "variable length": (VARLEN, lambda i: (np.arange(1 + i % 5, dtype="int16"), np.int32(i)), None),
    "variable length, python lists": (VARLEN, lambda i: (list(range(1 + i % 5)), i), None),
    "variable length, unsafe cast": (
        VARLEN,
        lambda i: (np.arange(1 + i % 5, dtype="int64"), np.int32(i)),
        (TypeError, r"component 'tokens': expected dtype int32, got int64, which does not cast safely to it"),
    ),
    # Integers that do not fit, whatever their width or sign: numpy reads 2**63 as uint64, -1 as int64.
    "python int past int64": (
        WIDE,
        lambda i: (x_of(i), 2**63 + i),
        (TypeError, r"component 'y': expected values that fit dtype int64; these uint64 values do not"),
    ),
    "python int below uint64": (
        UNSIGNED,
        lambda i: (x_of(i), -1 - i),
        (TypeError, r"component 'y': expected values that fit dtype uint64; these int64 values do not"),
    ),
    "python ints at the edges": (WIDE, lambda i: (x_of(i), [2**63 - 1, -(2**63)][i % 2]), None),
    "rows differ": (
        XY,
        one_row_short(lambda i: (x_of(i), np.int32(i))),
        (ValueError, r"component 'x' has \d rows and component 'y' \d; the components of an element share"),
    ),
    "variable length, rows differ": (
        VARLEN,
        one_row_short(lambda i: (np.arange(1 + i % 5, dtype="int32"), np.int32(i))),
        (ValueError, r"component 'tokens' has \d rows and component 'y' \d; the components of an element share"),
    ),
    "nan labels": (
        XY,
        nan_label,
        (TypeError, r"component 'y': expected dtype int32, got float64"),  # with NaN where the value holds one
    ),
}

#: The form a kind's values come in: a whole batch, one sample (map-style), or the whole arrays (array datasets).
FORM = dict.fromkeys(["put", "iterable", "iterable-workers", "graph", "device"], "batch")
FORM.update({"map": "sample", "map-workers": "sample", "arrays": "arrays", "held": "arrays", "fill": "batch"})

_UNSAFE = "expected dtype int32, got int64, which does not cast safely to it: pass .astype('int32'), or declare the "
_NAN = "Queue '{q}', component 'y': expected dtype int32, got float64 values with NaN, and NaN cannot be an integer: "
_NAN += "fill or drop the missing values first, or declare the component float64"
_SHARE = (
    "the components of an element share their leading (batch) axis (declare a leading axis of a component's own as "
)
_SHARE += "tq.own(n))"
_BARE = "Queue '{q}': expected 2 components (x, y), got a bare %s: give one value per component, as a tuple or a dict "
#: The exact text of each refusal (``{q}``: the queue's name), one per form where the forms' values differ.
MESSAGES = {
    "unsafe cast": "Queue '{q}', component 'y': " + _UNSAFE + "component int64",
    "python value too large": "Queue '{q}', component 'y': expected values that fit dtype int32; these int64 values "
    "do not (a cast would change them)",
    "wrong shape": {
        "batch": "Queue '{q}', component 'x': expected shape (<=4, 3), got (4, 2)",
        "sample": "Queue '{q}', component 'x': expected shape (3,) for a sample (the component's without its batch "
        "axis), got (2,)",
        "arrays": "Queue '{q}', component 'x': expected rows of shape (3,) (the component's without its batch axis), "
        "got an array of shape (8, 2)",
    },
    "wrong count": {
        "batch": "Queue '{q}': expected 2 components (x, y), got 3",
        "sample": "Queue '{q}': expected 2 components (x, y), got 3",
        "arrays": "Queue '{q}': expected 2 components (x, y), got 3 arrays: an array dataset has one array per "
        "component",
    },
    "bare array": {
        "batch": (_BARE % "array of shape (4, 3)") + "keyed by name",
        # An array dataset's bare array is an iterable of its rows, as before: each row is a bare sample.
        "sample": (_BARE % "array of shape (3,)") + "keyed by name",
        "arrays": (_BARE % "array of shape (3,)") + "keyed by name",
    },
    "variable length, unsafe cast": "Queue '{q}', component 'tokens': " + _UNSAFE + "component int64",
    "python int past int64": "Queue '{q}', component 'y': expected values that fit dtype int64; these uint64 values "
    "do not (a cast would change them)",
    "python int below uint64": "Queue '{q}', component 'y': expected values that fit dtype uint64; these int64 "
    "values do not (a cast would change them)",
    "rows differ": {
        "batch": "Queue '{q}': component 'x' has 4 rows and component 'y' 3; " + _SHARE,
        "arrays": "Queue '{q}': component 'x' has 8 rows and component 'y' 7; " + _SHARE,
    },
    "variable length, rows differ": "Queue '{q}': component 'tokens' has 4 rows and component 'y' 3; " + _SHARE,
    "nan labels": {
        "batch": _NAN,
        "arrays": _NAN,
        # A map-style dataset's first sample is refused: its label, 0.0, holds no NaN, but is a float.
        "sample": "Queue '{q}', component 'y': expected dtype int32, got float64, which does not cast safely to it: "
        "pass .astype('int32'), or declare the component float64",
    },
}

_NO_CAST = "(device arrays are not converted: cast it on the GPU)"
#: Device arrays are never cast (device memory is copied as it is): what needs a cast is refused instead, in
#: the device put's one wording (schema.device_dtype).
DEVICE_REFUSES = {
    "safe cast": "Queue '{q}', component 'x': expected dtype float32, got a device array of float16 " + _NO_CAST,
    "unsafe cast": "Queue '{q}', component 'y': expected dtype int32, got a device array of int64 " + _NO_CAST,
    "variable length": "Queue '{q}', component 'tokens': expected dtype int32, got a device array of int16 " + _NO_CAST,
    "variable length, unsafe cast": "Queue '{q}', component 'tokens': expected dtype int32, got a device array of "
    "int64 " + _NO_CAST,
    "nan labels": "Queue '{q}', component 'y': expected dtype int32, got a device array of float64 " + _NO_CAST,
}

#: Where one error is worded apart for one kind, and why (asserted, not skipped).
WORDED_APART = {
    ("graph", "bare array"): (
        "a graph variable's shape is known when the function runs, not when the node is made",
        (_BARE % "2-d variable") + "keyed by name",
    ),
    ("graph", "rows differ"): (
        "the rows of a graph's variables are known when the function runs: its Enqueue refuses them, naming itself",
        "Enqueue: Queue '{q}': component 'x' has 4 rows and component 'y' 3; " + _SHARE,
    ),
    ("graph", "variable length, rows differ"): (
        "the rows of a graph's variables are known when the function runs: its Enqueue refuses them, naming itself",
        "Enqueue: Queue '{q}': component 'tokens' has 4 rows and component 'y' 3; " + _SHARE,
    ),
    ("graph", "nan labels"): (
        "a graph variable has a dtype, not values: a float64 variable is refused for an int32 component when the "
        "node is made, NaN or not",
        "Queue '{q}', component 'y': expected dtype int32, got float64, which does not cast safely to it: pass "
        ".astype('int32'), or declare the component float64",
    ),
}

PYTHON_VALUES = (
    "python values",
    "python value too large",
    "variable length, python lists",
    "python int past int64",
    "python int below uint64",
    "python ints at the edges",
)
_GRAPH = (
    "a graph variable has a dtype, not Python values: theano.function converts the values it is called with to "
    "its input variables' dtypes by its own filter, before any Op runs (the rule decides the variable's dtype, "
    "schema.graph_value)"
)
_DEVICE = "Python values are host data, not device memory: they come through a host put"
#: What a kind cannot be given, and why (checked below, not skipped silently).
NOT_APPLICABLE = {
    # A fill function writes into the slot's own views, which have the component's dtype and shape:
    # it has no value of its own to check (only its row count, test_a_fill_functions_rows_are_checked).
    **{("fill", name): "a fill function writes into the slot's own views" for name, c in CASES.items() if c[2]},
    # An array dataset is arrays: Python values are no array dataset (stacked, they are an int64 array).
    **{
        (kind, name): "an array dataset is arrays, not Python values"
        for kind in ("arrays", "held")
        for name in ("python values", "python value too large")
    },
    **{
        (kind, name): "an array dataset is arrays, not Python values"
        for kind in ("arrays", "held")
        for name in ("python int past int64", "python int below uint64", "python ints at the edges")
    },
    **{("graph", name): _GRAPH for name in PYTHON_VALUES},
    **{("device", name): _DEVICE for name in PYTHON_VALUES},
    # A sample is one row of every component: a map-style dataset has no rows to differ.
    **{
        (kind, name): "a sample is one row of every component"
        for kind in ("map", "map-workers")
        for name in ("rows differ", "variable length, rows differ")
    },
    **{
        ("fill", name): "a fill function returns one count of rows for every component"
        for name in ("rows differ", "variable length, rows differ")
    },
}


def expected_message(kind, case, queue_name):
    """The exact text ``kind`` refuses ``case`` with."""
    if (kind, case) in WORDED_APART:
        text = WORDED_APART[kind, case][1]
    elif kind == "device" and case in DEVICE_REFUSES:
        text = DEVICE_REFUSES[case]
    else:
        text = MESSAGES[case]
        if isinstance(text, dict):
            text = text[FORM[kind]]
    return text.replace("{q}", queue_name)


def message_of(error):
    """An exception's own message: Theano re-raises an Op's error with the node that raised it appended."""
    return str(error).split("\nApply node that caused the error:")[0]


def stacked(values, component):
    if component.variable_axes or (isinstance(values[0], (int, float, list)) and not isinstance(values[0], np.generic)):
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
    return [sample.cut(batch) for batch in out] if hasattr(sample, "cut") else out


def array_dataset(sample):
    """The arrays of an array dataset holding every sample (cut as the case's batches are)."""
    samples = [sample(i) for i in range(SAMPLES)]
    arrays = tuple(np.stack([np.asarray(v) for v in values]) for values in zip(*samples))
    return sample.cut(arrays) if hasattr(sample, "cut") else arrays


def padded(rows):
    """A variable-length component's rows as one padded array of their dtype, and their lengths."""
    rows = [np.asarray(r) for r in rows]
    out = np.zeros((len(rows), max(len(r) for r in rows)), rows[0].dtype)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out, np.array([len(r) for r in rows], "int64")


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
                assert element[1][r] == want[1] and element[1].dtype == q.components[1].dtype
