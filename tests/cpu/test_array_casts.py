"""Array datasets whose rows are not the slots' bytes as they stand, gathered natively
(c_code/engine/core/tq_gather.c's row layouts): sources of a dtype the schema casts safely into the component's,
Fortran-order arrays and memmaps, strided, reversed and 0-stride views.  Each batch is exactly numpy's
``source[rows].astype(component dtype)``, ``stats()["gather"]`` says the engine gathered every component
("host"), and a Fortran memmap is gathered without a copy of the whole array."""

import time
import tracemalloc

import numpy as np
import pytest
from helpers import drain, holding_the_gil

import theano_queue as tq
from theano_queue.feed import arrays
from theano_queue.sampler import Sampler

N, BATCH = 101, 8


def images(n=N, dtype="float32"):
    return (np.arange(n * 2 * 3) % 251 - 100).astype(dtype).reshape(n, 2, 3)


def image_queue(x_dtype="float32", y_dtype="int32", batch=BATCH, capacity=3):
    return tq.Queue([("x", x_dtype, (batch, 2, 3)), ("y", y_dtype, (batch,))], capacity=capacity, target="cpu")


def feed(q, source, **kw):
    with tq.Feeder(q, source, shuffle=True, seed=5, **kw) as feeder:
        got = drain(q)
    return got, feeder.stats()


def check_exact(got, x, y, q, epochs=1):
    """Every batch is numpy's gather of the sampler's rows, cast to the component's dtype."""
    sampler = Sampler(len(x), q.components[0].shape[0], shuffle=True, seed=5, epochs=epochs)
    assert len(got) == sampler.batches_per_epoch * epochs
    for position, (xb, yb) in enumerate(got):
        rows = sampler.batch(position)
        assert xb.dtype == q.components[0].dtype and yb.dtype == q.components[1].dtype
        np.testing.assert_array_equal(xb, x[rows].astype(xb.dtype))
        np.testing.assert_array_equal(yb, y[rows].astype(yb.dtype))


@pytest.mark.parametrize("label_dtype", ["uint8", "int8", "int16", "uint16", "bool"])
def test_labels_of_a_narrower_dtype_are_cast_by_the_engine(label_dtype):
    x = images()
    y = (np.arange(N) * 37 % 200).astype(label_dtype)
    q = image_queue()
    got, stats = feed(q, (x, y))
    check_exact(got, x, y, q)
    assert stats["gather"] == {"x": "host", "y": "host"}  # not "numpy": no Python per batch


def test_float16_images_are_cast_to_float32_and_float32_to_float64():
    x = images(dtype="float16") / np.float16(7)  # values that are not integers
    y = np.arange(N, dtype="int32")
    for x_dtype, source in (("float32", x), ("float64", x.astype("float32"))):
        q = image_queue(x_dtype=x_dtype)
        got, stats = feed(q, (source, y))
        check_exact(got, source, y, q)
        assert stats["gather"] == {"x": "host", "y": "host"}


def strided_sources():
    x = images()
    y = np.arange(N, dtype="int64")
    wide = np.zeros((N, 2, 6), dtype="float32")
    wide[:, :, ::2] = x
    return {
        "fortran": np.asfortranarray(x),
        "every other element": wide[:, :, ::2],
        "reversed rows and axes": x[::-1, ::-1, ::-1].copy()[::-1, ::-1, ::-1],
        "an axis broadcast (stride 0)": np.broadcast_to(x[:, :1, :], x.shape),
        "one row repeated (stride 0)": np.broadcast_to(x[3], x.shape),
        "every other row, reversed": np.concatenate([x, x])[::-2][::-1][:N],
    }, y


@pytest.mark.parametrize("name", sorted(strided_sources()[0]))
@pytest.mark.parametrize("label_dtype", ["int32", "uint8"])
def test_strided_views_are_gathered_natively_and_exactly(name, label_dtype):
    sources, y = strided_sources()
    x = sources[name]
    q = image_queue()
    got, stats = feed(q, (x, y.astype(label_dtype)), epochs=2)
    check_exact(got, x, y, q, epochs=2)
    assert stats["gather"] == {"x": "host", "y": "host"}


def test_the_engine_says_which_rows_it_walks():
    sources, y = strided_sources()
    q = image_queue(y_dtype="int64")
    contiguous = images()
    assert arrays.gather_paths(q._ring, [contiguous, y], q.components) == ("rows", "rows")
    assert arrays.gather_paths(q._ring, [sources["fortran"], y], q.components) == ("elements", "rows")
    assert arrays.gather_paths(q._ring, [contiguous, y.astype("uint8")], q.components) == ("rows", "elements")
    assert arrays.gather_paths(q._ring, [contiguous[::-1], y[::-1]], q.components) == ("rows", "rows")
    # A cast the engine has no loop for (complex64 into complex128): None, and the Feeder gathers that
    # dataset with numpy; complex128 rows as they are are plain bytes.
    cq = tq.Queue([("x", "float32", (BATCH, 2, 3)), ("z", "complex128", (BATCH,))], capacity=3, target="cpu")
    z = (np.arange(N) * (1 + 2j)).astype("complex64")
    assert arrays.gather_paths(cq._ring, [contiguous, z.astype("complex128")], cq.components) == ("rows", "rows")
    assert arrays.gather_paths(cq._ring, [contiguous, z], cq.components) == ("rows", None)
    got, stats = feed(cq, (contiguous, z[::-1]))
    check_exact(got, contiguous, z[::-1], cq)
    assert stats["gather"] == {"x": "numpy", "z": "numpy"}


def test_cast_and_fortran_rows_refill_the_queue_while_the_training_thread_holds_the_gil():
    # The walked, cast rows are gathered by the engine without the GIL, like plain ones: a Python path per
    # batch would wait for the training thread, which holds the GIL through a step.
    capacity = 16
    q = image_queue(capacity=capacity)
    x, y = np.asfortranarray(images(n=4096)), (np.arange(4096) % 200).astype("uint8")
    with tq.Feeder(q, (x, y), epochs=None, close_when_done=False) as feeder:
        deadline = time.monotonic() + 10
        while q.size() < capacity and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.02)  # the feeder now waits for room

        def take_all_then_hold():
            for _ in range(capacity):
                q.get()
            return holding_the_gil(0.3, q.size)

        assert take_all_then_hold() == capacity
        assert feeder.stats()["gather"] == {"x": "host", "y": "host"}
    q.close(cancel_pending=True)


def test_put_rows_casts_only_what_the_rule_allows():
    # The engine's own rule (c_code/engine/core/tq_scalar.h) decides, as for every other put: no one tells it.
    q = image_queue()
    x, y = images(), np.arange(N, dtype="uint8")
    rows = np.arange(BATCH, dtype="int64")
    with pytest.raises(TypeError, match="component 'y': expected dtype int32, got int64, which does not cast safely"):
        q._ring.put_rows([x, y.astype("int64")], rows, BATCH, 0, 1)
    assert q._ring.put_rows([x, y], rows, BATCH, 0, 1) == 1
    assert q.get(timeout=5)[1].tolist() == list(range(BATCH))


@pytest.fixture
def fortran_memmap(tmp_path):
    """A Fortran-order float32 memmap of 4000 rows of 28 x 28 (12 MiB, 250 batches of 16 rows) and its labels."""
    n = 4000
    path = str(tmp_path / "x.f32")
    written = np.memmap(path, "float32", "w+", shape=(n, 28, 28), order="F")
    written[...] = (np.arange(n * 784, dtype="float32") % 1000).reshape(n, 28, 28)
    written.flush()
    del written
    return np.memmap(path, "float32", "r", shape=(n, 28, 28), order="F"), (np.arange(n) % 10).astype("uint8")


def test_a_fortran_memmap_is_gathered_without_a_copy_of_the_whole_array(fortran_memmap):
    # tracemalloc sees numpy's allocations (numpy reports its data buffers to it), not the file's pages:
    # a copy of the whole 12 MiB array (np.take's on a non-contiguous source) would show in the peak.
    x, y = fortran_memmap
    batch = 16
    q = tq.Queue([("x", "float32", (batch, 28, 28)), ("y", "int32", (batch,))], capacity=3, target="cpu")
    batch_bytes = batch * 28 * 28 * 4
    tracemalloc.start()
    try:
        with tq.Feeder(q, (x, y), shuffle=True, seed=5, epochs=1) as feeder:
            seen = 0
            for _ in range(feeder.planned_elements):
                xb, yb = q.get(timeout=60)
                if seen % 50 == 0:  # spot checks: the whole comparison would itself allocate
                    assert xb.tobytes() == np.asarray(x[Sampler(len(x), batch, True, 5).batch(seen)]).tobytes()
                seen += 1
                del xb, yb
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == 250 and feeder.stats()["gather"] == {"x": "host", "y": "host"}
    assert peak < 2 * batch_bytes + (1 << 20), "peak %d bytes, a batch is %d" % (peak, batch_bytes)


def odd_sources(tmp_path):
    """23 rows of 5 x 7 laid out every way the engine's gather walks (row walk, column walk, the four-at-a-time
    loop and its tail), of the component's dtype or cast into it: (source, component dtype) by name."""
    n = 23
    x = (np.arange(n * 5 * 7) % 97 - 40).astype("float32").reshape(n, 5, 7)
    wide = np.zeros((n, 5, 14), dtype="float32")
    wide[:, :, ::2] = x
    mapped = np.memmap(str(tmp_path / "x.f32"), "float32", "w+", shape=x.shape, order="F")
    mapped[...] = x
    mapped.flush()
    return {
        "fortran": (np.asfortranarray(x), "float32"),
        "fortran memmap": (np.memmap(str(tmp_path / "x.f32"), "float32", "r", shape=x.shape, order="F"), "float32"),
        "fortran, rows reversed": (np.asfortranarray(x)[::-1], "float32"),
        "every other element": (wide[:, :, ::2], "float32"),
        "every other element, reversed": (wide[::-1, ::-1, ::-2], "float32"),
        "every other row and element": (np.concatenate([wide, wide])[::2, :, ::2], "float32"),
        "fortran float16 into float32": (np.asfortranarray(x.astype("float16") / np.float16(3)), "float32"),
        "every other uint8 into float32": ((wide % 200).astype("uint8")[:, :, ::2], "float32"),
        "reversed int16 into int32": (x.astype("int16")[::-1, :, ::-1], "int32"),
        "fortran int32 into int64": (np.asfortranarray(x.astype("int32")), "int64"),
    }


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(
    "name",
    [
        "fortran",
        "fortran memmap",
        "fortran, rows reversed",
        "every other element",
        "every other element, reversed",
        "every other row and element",
        "fortran float16 into float32",
        "every other uint8 into float32",
        "reversed int16 into int32",
        "fortran int32 into int64",
    ],
)
def test_odd_rows_in_small_batches_are_exactly_numpys(tmp_path, name, batch):
    # Batches of one row and of three (the last one partial: 23 rows), rows of 5 x 7 elements (runs of 7 along
    # the last axis: one group of four and a tail), uint8 labels cast into int32.
    x, dtype = odd_sources(tmp_path)[name]
    y = (np.arange(len(x)) * 37 % 200).astype("uint8")
    q = tq.Queue([("x", dtype, (batch, 5, 7)), ("y", "int32", (batch,))], capacity=3, target="cpu")
    got, stats = feed(q, (x, y))
    check_exact(got, x, y, q)
    assert stats["gather"] == {"x": "host", "y": "host"}


@pytest.mark.parametrize("order", ["C", "F"])
def test_rows_of_no_elements_are_gathered(order):
    x, y = np.zeros((11, 3, 0), dtype="float32", order=order), np.arange(11, dtype="uint8")
    q = tq.Queue([("x", "float32", (4, 3, 0)), ("y", "int32", (4,))], capacity=3, target="cpu")
    got, stats = feed(q, (x, y))
    check_exact(got, x, y, q)
    assert stats["gather"] == {"x": "host", "y": "host"}
