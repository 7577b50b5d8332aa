"""A Feeder of every source kind (and worker processes) filling a queue that PyTensor graphs dequeue from."""

import json

import numpy as np
import pytensor
import pytest
from pt_datasets import Broken, Squares

import theano_queue.pytensor as tq

N, ROWS = 10, 4  # 10 samples in batches of 4: two full, one partial


def make_queue():
    return tq.Queue([("x", "float32", (ROWS, 3)), ("y", "int64", (ROWS,))], capacity=2)


def drain(f):
    """Every element a compiled function takes until QueueClosed: its y values, batch by batch."""
    got = []
    while True:
        try:
            got.append(f().tolist())
        except tq.QueueClosed:
            return got


def expected_batches():
    return [[i * i for i in range(s, min(s + ROWS, N))] for s in range(0, N, ROWS)]


def iterable_source():
    for s in range(0, N, ROWS):
        idx = np.arange(s, min(s + ROWS, N))
        yield np.repeat(idx[:, None], 3, 1).astype("float32"), idx * idx


def fill_source():
    starts = iter(range(0, N, ROWS))

    def fill(x, y):
        s = next(starts)  # StopIteration ends the source
        idx = np.arange(s, min(s + ROWS, N))
        x[: len(idx)] = idx[:, None]
        y[: len(idx)] = idx * idx
        return len(idx)

    return fill


SOURCES = {
    "iterable": lambda: dict(dataset=iterable_source()),
    "arrays": lambda: dict(dataset=(np.repeat(np.arange(N)[:, None], 3, 1).astype("float32"), np.arange(N) ** 2)),
    "map-style": lambda: dict(dataset=Squares(N)),
    "fill": lambda: dict(fill=fill_source()),
    "workers": lambda: dict(dataset=Squares(N), workers=2),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_feeder_source_reaches_the_graph_in_order(source, mode):
    q = make_queue()
    x, y = q.dequeue()
    f = pytensor.function([], y + 0 * x.sum(1).astype("int64"), mode=mode)
    with tq.Feeder(q, **SOURCES[source]()):
        assert drain(f) == expected_batches()


def test_a_failing_worker_reaches_the_graph_as_feeder_error(mode):
    q = make_queue()
    f = pytensor.function([], q.dequeue()[1], mode=mode)
    with tq.Feeder(q, Broken(N), workers=2):
        assert f().tolist() == [0, 1, 4, 9]  # the batch before the broken sample
        with pytest.raises(tq.FeederError) as caught:
            f()
    assert "sample 5 is broken" in str(caught.value) + str(caught.value.__cause__)


def test_stats_monitor_and_trace_see_the_graph_take(mode, tmp_path):
    q = make_queue()
    f = pytensor.function([], q.dequeue()[1], mode=mode)
    path = tmp_path / "trace.json"
    # The trace first: it records the next elements put.
    with q.trace(path, steps=3), tq.monitor(q, file=open(tmp_path / "monitor.txt", "w")), tq.Feeder(q, Squares(N)):
        assert drain(f) == expected_batches()
    stats = q.stats()
    assert stats["dequeued"] == 3 and stats["enqueued"] == 3
    elements = json.loads(path.read_text())["otherData"]["elements"]
    assert len(elements) == 3 and all("dequeued" in e["ns"] for e in elements)
