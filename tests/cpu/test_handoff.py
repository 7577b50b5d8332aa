"""The CPU hand-off: a host queue's Dequeue lends the element's memory to the graph.

What must hold: the graph (and whoever holds a returned output) reads exactly
what was put, however fast the producer reuses the slot; the ring never waits
for what the graph holds (capacity 1 included); a lent output is never
written into by a later call; ``q.get()`` still returns arrays of its own.
"""

import gc
import threading

import numpy as np
import pytest
import theano
import theano.tensor as T
from theano.compile.mode import Mode

import theano_queue as tq

ROWS, COLS = 32, 1027  # an odd row size: rows of the slot are not 16-byte aligned
STEPS = 300


def modes():
    return {
        "c": Mode(linker="cvm", optimizer="fast_run"),
        "c-nogc": Mode(linker="cvm_nogc", optimizer="fast_run"),
        # The Python linker needs every Op to have a perform: keep the graph off the GPU.
        "py": Mode(linker="py", optimizer="fast_compile").excluding("gpuarray"),
    }


def produce(q, steps, rows=ROWS):
    """Puts element i filled with i (a partial batch every 7th), as fast as the ring takes them."""

    def run():
        for i in range(steps):
            n = rows - 3 if i % 7 == 6 else rows
            q.put(np.full((n, COLS), i, "float32"), np.full(n, i, "int32"))
        q.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def queue(capacity):
    return tq.Queue(
        [("x", "float32", (ROWS, COLS)), ("y", "int32", (ROWS,))], capacity=capacity, target="cpu", timeout=60
    )


@pytest.mark.parametrize("capacity", [1, 2])
@pytest.mark.parametrize("mode", sorted(modes()))
def test_graph_reads_the_element_after_the_producer_could_reuse_its_slot(capacity, mode):
    """A premature release would let the producer overwrite x while the step still reads it.

    The step reads x twice around a matrix product that takes a while; the
    producer refills the ring's only slot as soon as it is released.
    """
    q = queue(capacity)
    x, y = q.dequeue()
    w = theano.shared(np.ones((COLS, 32), "float32") / COLS)
    first = x.min()
    later = T.dot(T.tanh(x), w).sum() * 0 + x.max()  # x.max() is read after the product
    f = theano.function([], [first, later, y.min(), y.max(), x.shape[0]], mode=modes()[mode])
    producer = produce(q, STEPS)
    for i in range(STEPS):
        lo, hi, ylo, yhi, n = f()
        assert lo == hi == ylo == yhi == i, (i, lo, hi, ylo, yhi)
        assert n == (ROWS - 3 if i % 7 == 6 else ROWS)
    with pytest.raises(tq.QueueClosed):
        f()
    producer.join()
    assert q.stats()["lent"] > STEPS // 2, "the hand-off should be the common path"


@pytest.mark.parametrize("capacity", [1, 3])
@pytest.mark.parametrize("mode", sorted(modes()))
def test_held_outputs_are_never_overwritten(capacity, mode):
    """Every output the caller keeps stays what it was, while producers keep going."""
    q = queue(capacity)
    x, y = q.dequeue()
    f = theano.function([], [x, y, x[0]], mode=modes()[mode])
    producer = produce(q, STEPS // 3)
    held = [f() for _ in range(STEPS // 3)]
    producer.join()
    for i, (xi, yi, row) in enumerate(held):
        assert (xi == i).all() and (yi == i).all() and (row == i).all(), i
        assert xi.shape[0] == (ROWS - 3 if i % 7 == 6 else ROWS)


def test_an_output_dropped_by_the_caller_goes_back_to_the_queue():
    """Dropping each output before the next call keeps every step on the hand-off, never a copy."""
    q = queue(1)
    x, y = q.dequeue()
    f = theano.function([], [x, y])
    producer = produce(q, 50)
    for i in range(50):
        xi, yi = f()
        assert type(xi.base).__name__ == "Lease" and (xi == i).all()
        del xi, yi
    producer.join()
    assert q.stats()["lent"] == 50


def test_a_lent_output_is_replaced_not_written_into():
    """When no spare is left the Dequeue copies: into fresh arrays, never into a lent one the caller holds."""
    q = queue(2)
    x, y = q.dequeue()
    f = theano.function([], x, mode=modes()["c-nogc"])
    producer = produce(q, 6)
    held = [f() for _ in range(6)]
    producer.join()
    assert [type(h.base).__name__ for h in held[:2]] == ["Lease", "Lease"]
    for i, h in enumerate(held):
        assert (h == i).all(), i


def test_in_place_work_on_the_output_is_the_graph_own():
    """Theano may destroy a dequeued output in place: the memory is the graph's while lent."""
    q = queue(1)
    x, y = q.dequeue()
    f = theano.function([], [(x + 1).sum(), y])
    producer = produce(q, 40)
    for i in range(40):
        s, yi = f()
        n = ROWS - 3 if i % 7 == 6 else ROWS
        assert s == pytest.approx((i + 1) * n * COLS, rel=1e-5)
    producer.join()


def test_get_returns_arrays_of_its_own():
    q = queue(1)
    q.put(np.full((ROWS, COLS), 5, "float32"), np.full(ROWS, 5, "int32"))
    x, y = q.get()
    assert x.base is None and y.base is None and x.flags.owndata
    assert q.stats()["lent"] == 0


def test_a_lent_element_outlives_its_queue():
    q = queue(1)
    x, _ = q.dequeue()
    f = theano.function([], x)
    q.put(np.full((ROWS, COLS), 3, "float32"), np.full(ROWS, 3, "int32"))
    out = f()
    del f, x, q
    gc.collect()
    assert (out == 3).all()
