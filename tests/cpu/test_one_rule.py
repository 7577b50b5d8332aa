"""One rule in one place (issue 42, point 4): which dtype casts safely into which, and whether integers fit, is
the engine's (c_code/engine/core/tq_scalar.c); Python asks it, the engine's put decides without calling back into
Python, and the gather's thresholds and mechanism names are the engine's too."""

import os
import re

import numpy as np
import pytest

import theano_queue as tq
from theano_queue import _engine
from theano_queue.core import schema, spec
from theano_queue.feed import arrays

DTYPES = sorted(spec.THEANO_DTYPES)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("source", DTYPES)
def test_the_engines_table_is_numpys_safe_casting(source):
    for target in DTYPES:
        assert _engine.casts_safely(np.dtype(source), np.dtype(target)) == np.can_cast(source, target, "safe"), (
            source,
            target,
        )


def test_the_put_asks_no_python_for_a_cast():
    q = tq.Queue([("x", "float32", (2,)), ("y", "int64", (2,))], target="cpu")
    assert not hasattr(q._ring, "cast")
    q._ring.put([np.ones(2, "float16"), np.array([1, 2], "uint8")])
    x, y = q.get()
    assert x.dtype == np.float32 and y.dtype == np.int64 and y.tolist() == [1, 2]


def test_the_engine_words_a_refusal_as_the_schema_does():
    q = tq.Queue([("y", "int32", (2,))], target="cpu", name="words")
    with pytest.raises(TypeError) as engine:
        q._ring.put([np.array([1, 2], "int64")])
    with pytest.raises(TypeError) as python:
        schema.component_value(q.components[0], np.array([1, 2], "int64"), q.name)
    assert (
        str(engine.value)
        == str(python.value)
        == (
            "Queue 'words', component 'y': expected dtype int32, got int64, which does not cast safely to it: "
            "pass .astype('int32'), or declare the component int64"
        )
    )


@pytest.mark.parametrize(
    "values, dtype, fits",
    [
        (np.array([2**63], "uint64"), "int64", False),
        (np.array([2**63 - 1], "uint64"), "int64", True),
        (np.array([-1], "int64"), "uint64", False),
        (np.array([0, 2**64 - 1], "uint64"), "uint64", True),
        (np.array([-129], "int64"), "int8", False),
        (np.array([-128, 127], "int64"), "int8", True),
        (np.array([2**24 + 1], "int64"), "float32", False),
        (np.array([2**24 + 2], "int64"), "float32", True),
        (np.array([2049], "int64"), "float16", False),
        (np.array([65504], "int64"), "float16", True),
        (np.array([2**53 + 1], "int64"), "float64", False),
        (np.array([2**64 - 1], "uint64"), "float64", False),
        (np.array([True, False]), "uint8", True),
        (np.array([2**64, -1], object), "uint64", False),
        (np.array([2**70], object), "float64", True),
        (np.array([2**70 + 1], object), "float64", False),
        (np.array([], "int64"), "int8", True),
        (np.array([1.5, np.inf, np.nan]), "float16", True),
        (np.array([70000.0]), "float16", False),
        (np.array([1e39]), "float32", False),
        (np.array([1.0]), "int64", False),
        (np.array([1 + 2j]), "float64", False),
        (np.array([1 + 2j]), "complex64", True),
    ],
)
def test_the_engine_says_whether_values_fit(values, dtype, fits):
    assert _engine.values_fit(values, np.dtype(dtype)) is fits


def test_the_gathers_names_and_threshold_are_the_engines():
    assert _engine.GATHER_MECHANISMS == ("host", "batch", "auto", "device") and _engine.GATHER_HELD == "device"
    assert arrays.GATHER_MECHANISMS == ("auto", "batch", "host")  # what THEANO_QUEUE_GATHER may ask for
    assert arrays.DEVICE_MIN_ROW_BYTES == _engine.GATHER_DEVICE_MIN_ROW == 256 * 1024
    q = tq.Queue([("x", "float32", (2,))], target="cpu")
    with pytest.raises(ValueError) as err:
        q._ring.gather_on_device([np.zeros((4, 2), "float32")], "nowhere")
    assert "'auto', 'batch', 'device' or 'host'" in str(err.value)


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def test_no_side_keeps_its_own_copy_of_the_engines_names_or_threshold():
    python = read("theano_queue/feed/arrays.py")
    assert not re.search(r"256\s*\*\s*1024|262144", python), "arrays.py keeps its own threshold"
    assert not re.search(r"[\"']batch[\"'],\s*[\"']host[\"']", python), "arrays.py keeps its own names"
    memory = read("c_code/python/tq_py_memory.c")
    assert '"batch"' not in memory and '"host"' not in memory, "tq_py_memory.c keeps its own names"
    rows = read("c_code/engine/cuda/tq_cuda_rows.c")
    assert "256 * 1024" not in rows, "tq_cuda_rows.c keeps its own threshold"


def test_the_schema_keeps_no_table_of_its_own():
    source = read("theano_queue/core/schema.py")
    assert "can_cast" not in source and "iinfo" not in source
    assert "ring.cast" not in read("theano_queue/core/port.py")
