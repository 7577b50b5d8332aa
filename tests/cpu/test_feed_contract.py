"""One contract for every producer kind: the same values are taken or refused alike, with the same message.

The cases, the kinds and the exact text of every refusal are
tests/support/feed_contract.py's.  Here every kind but device puts runs
(those, against the stand-in driver, in tests/standin/test_device_contract.py):
an iterable yields the samples of a batch stacked (a list of rows for a
variable-length component), in the Feeder's thread or in worker processes,
``q.put`` takes those batches, a compiled graph's Enqueue takes them as its
inputs' values, an array dataset holds every sample stacked (gathered by the
host or, held, by the GPU: the upload stood in for as in
tests/cpu/test_held.py), a fill function writes the batch into the slot.  A
refused value reaches the consumer as FeederError (or, for ``q.put``, a graph
enqueue and an array dataset, is raised at once); at the root of either is
the same class with the same message, one wording per error, and the queue
takes the next epoch afterwards.

The rule itself lives in one place (theano_queue/core/schema.py):
test_no_entry_casts_on_its_own replaces it with one that refuses everything,
and every kind given a value that needs a cast is refused by it;
test_nothing_outside_the_schema_casts_to_a_components_dtype reads the
package's source for casts of its own.
"""

import os
import re

import numpy as np
import pytest
from feed_contract import (
    CASES,
    KINDS,
    MESSAGES,
    NOT_APPLICABLE,
    ROWS,
    SAMPLES,
    WORDED_APART,
    XY,
    array_dataset,
    batches,
    check_values,
    expected_message,
    message_of,
    padded,
    x_of,
)
from pretend import pretend_gpu

import theano_queue as tq
from theano_queue.core import schema
from theano_queue.feed import factory, held, producers
from theano_queue.feed.arrays import ArrayProducer
from theano_queue.feed.dispatcher import WorkerProducer

HOST_KINDS = [k for k in KINDS if k != "device"]  # device puts: tests/standin/test_device_contract.py


class Samples:
    def __init__(self, sample):
        self.sample = sample

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return self.sample(i)


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


class GraphPuts(Puts):
    """A compiled ``q.enqueue`` called once per batch, as a Feeder's context: its inputs are variables of each
    value's own dtype and rank (a variable-length component's rows padded, their lengths an input too), so
    that the rule decides on the variable's dtype when the node is made; a shape is the engine's at the call."""

    def __enter__(self):
        import theano

        try:
            first = self.batches[0]
            args, lengths = graph_arguments(self.q, first)
            variables = [theano.tensor.TensorType(a.dtype, (False,) * a.ndim)() for a in args]
            by_name = {name: theano.tensor.lvector() for name in lengths}
            element = variables if isinstance(first, tuple) else [variables[0]]  # a bare array stays bare
            enqueue = self.q.enqueue(*element, lengths=by_name or None)
            put = theano.function(variables + list(by_name.values()), enqueue)
            for batch in self.batches:
                args, lengths = graph_arguments(self.q, batch)
                put(*args, *lengths.values())
        finally:
            self.q.close()
        return self


def graph_arguments(q, batch):
    """A batch as a compiled enqueue's arguments: one array per value, and the lengths by component name."""
    args, lengths = [], {}
    for j, value in enumerate(batch if isinstance(batch, tuple) else (batch,)):
        if isinstance(value, list):  # a variable-length component's rows
            value, lengths[q.components[j].name] = padded(value)
        args.append(np.asarray(value))
    return args, lengths


def as_gpu_queue(q, monkeypatch):
    """A host queue passing for a GPU queue whose held arrays' upload is stood in for (tests/cpu/test_held.py)."""
    monkeypatch.setattr(held.HeldArrayProducer, "upload", lambda producer: None)
    monkeypatch.setattr(held.HeldArrayProducer, "gather_on_host", lambda producer: None)
    return pretend_gpu(q)


def feeder(kind, q, sample, monkeypatch=None):
    if kind == "put":
        return Puts(q, batches(q, sample))
    if kind == "graph":
        return GraphPuts(q, batches(q, sample))
    if kind in ("iterable", "iterable-workers"):
        return tq.Feeder(q, batches(q, sample), workers=2 if kind == "iterable-workers" else 0)
    if kind == "fill":
        return tq.Feeder(q, fill=fill_function(q, sample))
    if kind in ("map", "map-workers"):
        return tq.Feeder(q, Samples(sample), workers=2 if kind == "map-workers" else 0)
    if not isinstance(sample(0), tuple):
        return tq.Feeder(q, np.stack([sample(i) for i in range(SAMPLES)]))  # a bare array: an iterable of its rows
    arrays = array_dataset(sample)
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
    except (TypeError, ValueError) as exc:  # q.put and a graph's enqueue refuse at once
        return got, exc
    return got, None


def still_usable(q):
    q.close(cancel_pending=True)
    q.reopen()
    y = q.components[-1].dtype  # the label's own dtype: int32, int64 or uint64 by the case's spec
    good = (lambda i: (x_of(i), y.type(i))) if not q._layout.varying else CASES["variable length"][1]
    with tq.Feeder(q, Samples(good)):
        assert len(drain(q)) == SAMPLES // ROWS


def check_refusal(kind, case, error, queue_name):
    """``error`` is the case's class with its one exact message (tests/support/feed_contract.py)."""
    cls, core = CASES[case][2]
    assert isinstance(error, cls), "%s: expected %s, got %r" % (kind, cls.__name__, error)
    message = message_of(error)
    assert re.search(core, message), "%s: %r lacks %r" % (kind, message, core)
    assert message == expected_message(kind, case, queue_name), (kind, case)


@pytest.mark.parametrize("kind", HOST_KINDS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_producer_kind_takes_and_refuses_alike(kind, case, monkeypatch):
    spec, sample, bad = CASES[case]
    if (kind, case) in NOT_APPLICABLE:
        assert NOT_APPLICABLE[kind, case]  # said why
        return
    q = tq.Queue(spec, capacity=2 if kind not in ("put", "graph") else SAMPLES // ROWS, target="cpu")
    if kind in ("arrays", "held") and q._layout.varying:
        with pytest.raises(TypeError, match="variable \\(upto\\) axis"):  # rows of one shape cannot vary
            tq.Feeder(q, (np.zeros((SAMPLES, 6), "int32"), np.zeros(SAMPLES, "int32")))
        return
    got, error = outcome(kind, q, sample, monkeypatch)
    if bad is None:
        assert error is None, "%s refused a good case: %r" % (kind, error)
        check_values(q, got, sample)
    else:
        check_refusal(kind, case, error, q.name)
    still_usable(q)


def test_every_wording_apart_says_why():
    for (kind, case), (reason, _) in WORDED_APART.items():
        assert kind in KINDS and CASES[case][2] is not None and reason


#: The refusals each worded by one of the schema's templates (theano_queue/core/schema.py, WORDING), which the
#: engine's own refusals read too.
WORDED_BY = {
    "unsafe cast": "unsafe",
    "variable length, unsafe cast": "unsafe",
    "python value too large": "fit",
    "python int past int64": "fit",
    "python int below uint64": "fit",
    "rows differ": "rows",
    "variable length, rows differ": "rows",
    "nan labels": "nan",
}


def test_every_refusal_of_the_rule_is_a_case():
    assert set(WORDED_BY.values()) == set(schema.WORDING) - {"where"}
    assert set(WORDED_BY) <= set(MESSAGES)


@pytest.mark.parametrize("kind", [k for k in HOST_KINDS if k != "fill"])
@pytest.mark.parametrize("case", list(WORDED_BY))
def test_every_entry_words_its_refusal_by_the_schema(kind, case, monkeypatch):
    """The one wording: each refusal of the rule, whichever entry (Python's or the engine's put, a graph's
    Enqueue) refused it, is the schema's template: a stand-in template is what every entry then says."""
    spec, sample, _ = CASES[case]
    if (kind, case) in NOT_APPLICABLE or (kind in ("arrays", "held") and case.startswith("variable")):
        return
    key = WORDED_BY[case]
    if kind == "graph" and case == "nan labels":
        key = "unsafe"  # a graph variable has a dtype, not values (WORDED_APART)
    if kind == "map" and case == "nan labels":
        key = "unsafe"  # the first sample holds no NaN (MESSAGES)
    monkeypatch.setitem(schema.WORDING, key, "[the stand-in %s] " % key + schema.WORDING[key])
    q = tq.Queue(spec, capacity=2 if kind not in ("put", "graph") else SAMPLES // ROWS, target="cpu")
    got, error = outcome(kind, q, sample, monkeypatch)
    if kind in ("iterable-workers", "map-workers"):
        # The workers' processes import the real schema: what matters here is that nothing went in unchecked.
        assert error is not None and not got
        return
    assert "[the stand-in %s] " % key in message_of(error), (kind, error)


def test_a_fill_functions_rows_are_checked():
    q = tq.Queue(XY, capacity=2, target="cpu")
    with tq.Feeder(q, fill=lambda x, y: ROWS + 1):
        with pytest.raises(tq.FeederError) as err:
            drain(q)
    assert "do not fit the components" in str(root(err.value))
    still_usable(q)


def test_the_table_holds_every_source_with_every_runner_it_can_be_asked_for():
    asked = {(s, r) for s in factory.OWN_RUNNER for r in (factory.OWN_RUNNER[s], "workers", "gpu")}
    assert set(factory.PAIRS) == asked - {("arrays", "gpu")}  # an array dataset with device=True is held


#: The producer each allowed pair builds.
BUILT = {
    ("fill", "thread"): producers.FillProducer,
    ("iterable", "thread"): producers.IterableProducer,
    ("iterable", "workers"): WorkerProducer,
    ("map", "thread"): producers.InlineMapProducer,
    ("map", "workers"): WorkerProducer,
    ("arrays", "copy pool"): ArrayProducer,
    ("held arrays", "gpu"): held.HeldArrayProducer,
}


@pytest.mark.parametrize("source, runner", sorted(factory.PAIRS))
def test_every_source_and_runner_pair_is_built_or_refused_with_the_tables_reason(source, runner, monkeypatch):
    q = tq.Queue(XY, capacity=2, target="cpu")
    sample = CASES["good"][1]
    arrays = tuple(np.stack(values) for values in zip(*(sample(i) for i in range(SAMPLES))))
    given = {
        "fill": ((), {"fill": fill_function(q, sample)}),
        "iterable": ((batches(q, sample),), {}),
        "map": ((Samples(sample),), {}),
        "arrays": ((arrays,), {}),
        "held arrays": ((arrays,), {"device": True}),
    }
    args, kwargs = given[source]
    kwargs = dict(kwargs, **{"workers": {"workers": 2}, "gpu": {"device": True}}.get(runner, {}))
    if kwargs.get("device"):
        q = as_gpu_queue(q, monkeypatch)
    reason = factory.PAIRS[source, runner]
    if reason:
        with pytest.raises(TypeError) as err:
            tq.Feeder(q, *args, **kwargs)
        assert str(err.value) == "Feeder(%s): %s" % (
            q.name,
            reason.format(given=type(args[0]).__name__ if args else None),
        )
        assert not q.feeders
        return
    with tq.Feeder(q, *args, **kwargs) as f:
        assert type(f._producer) is BUILT[source, runner]
        got = drain(q)
    check_values(q, got, sample)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A conversion of a value's dtype: numpy's casts and their checks, a graph library's cast, the C API's.
CASTS = re.compile(
    r"can_cast\(|\.astype\(|(?<!schema)\.cast\(|casting=|"
    r"(?:asarray|ascontiguousarray|asfortranarray|np\.array)\([^)]*\bdtype\b|"
    r"FORCECAST|PyArray_Cast|PyArray_FromAny|PyArray_FromArray|PyArray_FROM_OTF"
)
#: The conversions outside theano_queue/core/schema.py and the engine's face of the rule (c_code/python/tq_py_schema.c),
#: each by (file, what the line does) and why it is no component value's cast.  A line that matches CASTS and is
#: not here fails; so does an entry left stale.
NOT_A_COMPONENTS_CAST = {
    ("theano_queue/core/varlen.py", "np.asarray(self.pad_value, packed.dtype)"): "the pad value, cast by the schema "
    "when the queue was made (spec.parse_pad_values), reshaped",
    ("theano_queue/core/varlen.py", "np.asarray(self.pad_value, self.dtype)"): "the same pad value, in the graph",
    ("theano_queue/core/varlen.py", "given.astype(np.int64)"): "row lengths, the engine's int64: no component's value",
    ("theano_queue/core/varlen.py", 'tensor.cast(lengths, "int64")'): "row lengths in the graph: the engine's int64",
    ("theano_queue/clients/keras.py", "K.cast(t, 'float32')"): "a message's advice to the user",
    ("theano_queue/tools/demo.py", '.astype("float32")'): "the demo's own data, made for its queue",
    ("theano_queue/tools/demo.py", '.astype("int32")'): "the demo's own labels, made for its queue",
    ("theano_queue/graph/pytensor.py", 'np.asarray(queue._key, dtype="int64")'): "the token's registry key",
    ("theano_queue/feed/sampler.py", ".astype(np.int64"): "sample indices and lengths, the sampler's own int64",
    ("theano_queue/tools/probe.py", ".astype(np.uint8)"): "the probe's test pattern",
    ("c_code/python/tq_py_element.c", "PyArray_FromArray(arr, want, NPY_ARRAY_C_CONTIGUOUS)"): "the copy of an "
    "array the engine's rule let in (rule_array, c_code/python/tq_py_schema.c) into a C-contiguous array of the "
    "component's dtype: numpy's cast loop, doing what the rule decided",
}


RULE_FILES = (os.path.join("theano_queue", "core", "schema.py"), os.path.join("c_code", "python", "tq_py_schema.c"))


def source_lines():
    """(path, line) of the package's Python and the engine's CPython face, but the rule itself (the schema and
    the engine's face of it)."""
    for folder, ext in (
        ("theano_queue", ".py"),
        (os.path.join("c_code", "python"), ".c"),
        (os.path.join("c_code", "ops"), ".c"),
    ):
        for where, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(files):
                path = os.path.relpath(os.path.join(where, name), ROOT)
                if name.endswith(ext) and path not in RULE_FILES:
                    with open(os.path.join(ROOT, path)) as f:
                        for line in f:
                            yield path.replace(os.sep, "/"), line


def test_nothing_outside_the_schema_casts_to_a_components_dtype():
    unexplained, used = [], set()
    for path, line in source_lines():
        if not CASTS.search(line):
            continue
        known = [key for key in NOT_A_COMPONENTS_CAST if key[0] == path and key[1] in line]
        if known:
            used.update(known)
        else:
            unexplained.append("%s: %s" % (path, line.strip()))
    assert not unexplained, "casts outside theano_queue/core/schema.py (route them through the schema):\n" + "\n".join(
        unexplained
    )
    assert used == set(NOT_A_COMPONENTS_CAST), "stale entries: %s" % sorted(set(NOT_A_COMPONENTS_CAST) - used)
