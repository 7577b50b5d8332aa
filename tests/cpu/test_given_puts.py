"""Elements a Feeder's iterable gives up: copied after the put returns, and only when nothing else can write them.

A Feeder over a generator keeps the GIL across a put whose element nothing
else holds (``Ring.put_given``: the ring's putter thread copies it), so that
it needs the GIL once per element, not twice (doc/design.rst, "The GIL and a
Feeder over an iterable").  What users rely on: every element arrives whole,
in order, exactly once, also when the source writes into a batch it already
yielded; a refused element costs the queue nothing.
"""

import gc
import weakref

import numpy as np
import pytest

import theano_queue as tq
from theano_queue.core.errors import QueueClosed
from theano_queue.feed.sources import stream


def drained(q):
    out = []
    while True:
        try:
            out.append(q.get(timeout=5))
        except QueueClosed:
            return out


def test_a_generators_fresh_batches_are_copied_after_each_put_returns():
    rows = np.arange(64 * 4096, dtype="float32").reshape(64, 4096)
    order = np.random.default_rng(0).permutation(64)
    q = tq.Queue([("x", "float32", (16, 4096)), ("y", "int64", (16,))], capacity=64, target="cpu")  # 256 KiB
    batches = [order[i : i + 16] for i in range(0, 64, 16)] * 5
    with tq.Feeder(q, ((rows[idx], idx.astype("int64")) for idx in batches)) as feeder:  # arrays of their own
        feeder.join(10)
    got = drained(q)
    assert [y.tolist() for _, y in got] == [idx.tolist() for idx in batches]
    assert all(np.array_equal(x, rows[idx]) for (x, _), idx in zip(got, batches))
    # No put waited to take the GIL back after a copy: the ring's putter made them all.
    assert feeder.stats()["gil_waits"] == 0


def test_a_batch_the_source_writes_again_is_copied_before_the_put_returns():
    # The generator reuses one buffer: a copy made after the put returned would read the next batch's values.
    buffer = np.empty((64, 8192), "float32")

    def refilled():
        for i in range(40):
            buffer[...] = i
            yield buffer

    q = tq.Queue([("x", "float32", (64, 8192))], capacity=48, target="cpu")
    with tq.Feeder(q, refilled()) as feeder:
        feeder.join(20)
    got = [x for (x,) in drained(q)]
    assert len(got) == 40
    for i, x in enumerate(got):
        assert x.min() == x.max() == i
    assert feeder.stats()["gil_waits"] == 40  # each put copied before it returned


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda data, i: data[i], id="a view of the dataset"),
        pytest.param(lambda data, i: KEPT.append(data[i].copy()) or KEPT[-1], id="an array the source keeps"),
    ],
)
def test_what_something_else_holds_is_copied_before_the_put_returns(make):
    data = np.arange(20 * 32768, dtype="float32").reshape(20, 32768)  # 128 KiB rows
    q = tq.Queue([("x", "float32", (32768,))], capacity=32, target="cpu")
    with tq.Feeder(q, (make(data, i) for i in range(20))) as feeder:
        feeder.join(10)
    got = [x for (x,) in drained(q)]
    assert all(np.array_equal(x, data[i]) for i, x in enumerate(got)) and len(got) == 20
    assert feeder.stats()["gil_waits"] == 20
    KEPT.clear()


KEPT: list = []


def test_a_small_element_of_a_host_queue_is_copied_at_once_with_the_gil_held():
    # Up to 64 KiB: the copy costs less than waking the putter or giving the GIL up; held or not, the element
    # is in the queue when the put returns.
    data = np.arange(30 * 256, dtype="float32").reshape(30, 256)
    q = tq.Queue([("x", "float32", (256,))], capacity=32, target="cpu")
    box = [data[0]]  # a view: something else holds its bytes
    q._port.put_given(box, 1.0)
    assert box == [] and q.size() == 1  # in the queue already, no flush needed
    with tq.Feeder(q, (row for row in data[1:])) as feeder:
        feeder.join(10)
    got = [x for (x,) in drained(q)]
    assert all(np.array_equal(x, data[i]) for i, x in enumerate(got)) and len(got) == 30
    assert feeder.stats()["gil_waits"] == 0


def test_a_stream_keeps_no_reference_to_an_element_it_gave():
    made = []

    def fresh():
        array = np.zeros(4)
        made.append(weakref.ref(array))
        return (array,)

    def source():
        for _ in range(3):
            yield fresh()

    elements = stream(source(), epochs=1)
    first = next(elements)
    del first
    gc.collect()
    assert made[0]() is None  # the stream's frame let go of it: only its taker held it


def test_put_given_empties_the_box_and_a_refused_element_stays_in_it():
    q = tq.Queue([("x", "float32", (4,)), ("y", "int32", (4,))], capacity=2, target="cpu", name="given")
    box = [(np.ones(4, "float32"), np.arange(4, dtype="int32"))]
    q._port.put_given(box, 1.0)
    assert box == []
    bad = (np.ones(4, "float64"), np.arange(4, dtype="int32"))
    box.append(bad)
    with pytest.raises(TypeError, match="Queue 'given', component 'x': expected dtype float32, got float64"):
        q._port.put_given(box, 1.0)
    assert box == [bad] and q.size() <= 1
    q._port.flush_given()
    assert q.size() == 1
    x, y = q.get()
    assert x.tolist() == [1.0] * 4 and y.tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="a list holding one element"):
        q._ring.put_given((np.ones(4, "float32"), np.zeros(4, "int32")))


def test_a_queue_closed_and_cancelled_under_given_puts_says_so_and_stays_usable():
    q = tq.Queue([("x", "float32", (1 << 20,))], capacity=4, target="cpu", name="cut")
    for _ in range(4):
        q._port.put_given([np.ones(1 << 20, "float32")], 1.0)  # 4 MiB each: the putter is still at them
    q.close(cancel_pending=True)
    try:
        q._port.flush_given()  # what the putter had not published when the close came is dropped
    except QueueClosed as exc:
        assert "cancelled" in str(exc)
    assert q.size() == 0
    q.reopen()
    q.put(np.full(1 << 20, 2, "float32"))
    assert q.get()[0][0] == 2
