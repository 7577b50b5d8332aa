"""The monitor: its figures against known injected waits, its line and its verdict."""

import io
import threading
import time

import numpy as np
import pytest

import theano_queue as tq
from theano_queue.tools.monitor import (
    COMPUTE_BOUND,
    INPUT_BOUND,
    LINE,
    LINE_WITH_TOTAL,
    SHORTEST_JUDGED,
    Figures,
    MonitorLine,
    _postfix,
    bytes_per_second,
    verdict,
)

BATCH = np.zeros((64, 16), "float32")


def queue(capacity=3, name="watched"):
    return tq.Queue([("x", "float32", (64, 16))], capacity=capacity, target="cpu", name=name)


def drain(q, pause=0.0):
    taken = 0
    while True:
        try:
            q.get()
        except tq.QueueClosed:
            return taken
        taken += 1
        time.sleep(pause)


def test_figures_match_injected_waits_and_fill():
    """0.3 s of consumer wait and a ring holding 2, then 1, then 0 elements for 0.3 s each."""
    q = queue()
    out = io.StringIO()
    with tq.monitor(q, interval=0.05, file=out) as m:
        timer = threading.Timer(0.3, q.put, args=(BATCH,))
        timer.start()
        q.get()  # waits 0.3 s for the timer's put
        q.put(BATCH), q.put(BATCH)
        time.sleep(0.3)
        q.get()
        time.sleep(0.3)
        q.get()
        time.sleep(0.3)
        f = m.figures()
    assert f.elements == 3
    assert f.seconds == pytest.approx(1.2, abs=0.1)
    assert f.model_waited * f.seconds == pytest.approx(0.3, abs=0.05)
    assert f.producers_waited == pytest.approx(0.0, abs=0.01)
    # (2 + 1 + 0) elements x 0.3 s over the span
    assert f.mean_fill * f.seconds == pytest.approx(0.9, abs=0.05)
    assert f.gbps * f.seconds * 1e9 == pytest.approx(3 * BATCH.nbytes)
    assert f.capacity == 3 and f.workers_busy is None
    text = out.getvalue()
    # 3 x 4 KiB in 1.2 s: about 10 kB/s, in a unit that shows it.
    assert "watched" in text and "model waited" in text and "fill" in text and " kB/s" in text
    assert m.last_verdict.startswith("watched: input-bound: the model waited ")
    assert m.last_verdict in text


def test_input_bound_feeder_progress_line_and_verdict():
    def slow_source():
        for _ in range(12):
            time.sleep(0.04)
            yield BATCH

    q = queue()
    out = io.StringIO()
    with tq.Feeder(q, slow_source(), progress={"interval": 0.05, "file": out}) as feeder:
        assert drain(q) == 12
    m = feeder._monitor
    f = m.figures()
    assert f.model_waited >= 0.7 and f.producers_waited <= 0.1 and f.mean_fill < 0.5
    assert "input-bound by the source" in m.last_verdict and "worker processes" in m.last_verdict
    assert out.getvalue().rstrip().endswith(m.last_verdict)


def test_compute_bound_and_a_monitor_that_ends_with_its_feeder():
    q = queue(capacity=3)
    out = io.StringIO()
    feeder = tq.Feeder(q, [BATCH] * 10, progress={"interval": 0.05, "file": out}).start()
    time.sleep(0.15)  # the ring fills up before the model starts
    assert drain(q, pause=0.05) == 10
    feeder.join()
    m = feeder._monitor
    deadline = time.monotonic() + 3
    while m.last_verdict is None and time.monotonic() < deadline:  # no with block: it closes itself
        time.sleep(0.02)
    assert "compute-bound: input is never waited for" in m.last_verdict
    f = m.figures()
    assert f.model_waited < COMPUTE_BOUND and f.producers_waited >= 0.5 and f.mean_fill >= 1.5
    assert "10/10" in out.getvalue()  # the source's length is the bar's total


class FakeWorkerFeeder:
    """Stands in for a feeder with worker processes: stats() says how busy they are."""

    def __init__(self, queue, stats):
        self.queue, self._stats, self.running = queue, stats, True

    def stats(self):
        return self._stats()


def test_worker_busy_share_from_feeder_stats():
    q = queue()
    started = time.monotonic()
    busy = FakeWorkerFeeder(q, lambda: {"workers": 4, "worker_busy_s": 3.0 * (time.monotonic() - started)})
    with tq.monitor(q, feeder=busy, interval=0.05, file=io.StringIO()) as m:
        time.sleep(0.3)
        assert m.figures().workers_busy == pytest.approx(0.75, abs=0.05)
    share = FakeWorkerFeeder(q, lambda: {"worker_busy": 0.5})
    out = io.StringIO()
    with tq.monitor(q, feeder=share, interval=0.05, file=out) as m:
        time.sleep(0.12)
        assert m.figures().workers_busy == 0.5
    assert "workers busy 50%" in out.getvalue()

    def broken():
        raise RuntimeError("no stats today")

    with tq.monitor(q, feeder=FakeWorkerFeeder(q, broken), interval=0.05, file=io.StringIO()) as m:
        time.sleep(0.06)
        assert m.figures().workers_busy is None


def test_verdict_thresholds():
    def figures(waited, elements=10):
        return Figures(1.0, elements, 10.0, 0.1, 1.0, 2, waited, 0.0, None)

    assert verdict(figures(0.31)) == "input-bound: the model waited 31% of the time; add workers or use read_into"
    assert verdict(figures(INPUT_BOUND)).startswith("input-bound")
    assert verdict(figures(0.0)).startswith("compute-bound: input is never waited for")
    assert verdict(figures(0.02)).startswith("balanced: the model waited 2.0% of the time")
    assert verdict(figures(0.5, elements=0)) == "no element was taken: nothing to judge"


def test_monitor_arguments_and_states():
    q = queue()
    with pytest.raises(ValueError, match="interval"):
        tq.monitor(q, interval=0)
    m = tq.Monitor(q, file=io.StringIO(), verdict=False)
    with pytest.raises(RuntimeError, match="not started"):
        m.figures()
    m.close()  # closing one never started does nothing
    with m:
        assert m.running
        with pytest.raises(RuntimeError, match="already started"):
            m.start()
    assert not m.running and m.last_verdict == "watched: no element was taken: nothing to judge"
    m.close()  # twice is fine


def test_the_line_in_80_columns_shows_the_decisive_figures_first():
    """What a terminal of 80 columns shows, with workers and a known total: the share the model waited,
    how busy the workers were (together, they decide "add workers") and the share the ring was full."""
    figures = Figures(
        seconds=9.0,
        elements=12500,
        elements_per_s=1388.9,
        gbps=0.000154,
        mean_fill=1.8,
        capacity=4,
        model_waited=0.04,
        producers_waited=0.49,
        workers_busy=0.97,
    )
    postfix = _postfix(figures)
    assert (
        postfix.index("model waited 4%")
        < postfix.index("workers busy 97%")
        < postfix.index("ring full 49%")
        < postfix.index("fill 1.8/4")
        < postfix.index("1389 el/s")
        < postfix.index("154 kB/s")
    )
    assert "blocked" not in postfix  # the producers waiting for a slot is no fault: the input is ahead
    decisive = "model waited 4%, workers busy 97%, ring full 49%"
    line = MonitorLine.format_meter(12500, None, 9.0, ncols=80, prefix="digits", bar_format=LINE, postfix=postfix)
    assert decisive in line and len(line) <= 80, line
    with_total = MonitorLine.format_meter(
        12500, 20000, 9.0, ncols=80, prefix="digits", bar_format=LINE_WITH_TOTAL, postfix=postfix
    )
    assert decisive in with_total and "62%" in with_total and len(with_total) <= 80, with_total
    wide = MonitorLine.format_meter(
        12500, 20000, 9.0, ncols=200, prefix="digits", bar_format=LINE_WITH_TOTAL, postfix=postfix
    )
    assert "|" in wide and postfix in wide, wide  # where there is room, the bar is drawn


@pytest.mark.parametrize(
    "rate, text",
    [
        (0.0, "0 B/s"),
        (512.0, "512 B/s"),
        (4096 / 1.2, "3.41 kB/s"),
        (1.54e5, "154 kB/s"),
        (2.5e7, "25 MB/s"),
        (5.4e8, "540 MB/s"),
        (3.63e9, "3.63 GB/s"),
        (55.3e9, "55.3 GB/s"),
    ],
)
def test_bytes_per_second_in_a_unit_that_shows_small_rates(rate, text):
    assert bytes_per_second(rate) == text


def test_no_verdict_on_a_span_too_short_to_judge():
    """The demo's 3 ms epochs: a wake-up of the consumer thread would flip the verdict."""
    short = Figures(0.003, 23, 7666.0, 0.15, 1.8, 4, 0.3, 0.49, None)
    assert verdict(short) == (
        "too short to judge: 23 element(s) in 3 ms, the model waited 0.9 ms (a verdict needs %g s)" % SHORTEST_JUDGED
    )
    assert verdict(short._replace(seconds=SHORTEST_JUDGED)).startswith("input-bound")
    q = queue(capacity=4, name="digits")
    out = io.StringIO()
    with tq.Feeder(q, [BATCH] * 3, progress={"interval": 0.05, "file": out}) as feeder:
        assert drain(q) == 3
    assert "too short to judge" in feeder._monitor.last_verdict


def test_workers_busy_from_the_feeders_own_stats():
    """The dicts theano_queue's feeders return: a share per worker in a list, and their mean."""
    q = queue()
    workers = FakeWorkerFeeder(q, lambda: {"workers": 2, "elements": 5, "busy": 0.6, "worker_busy": [0.5, 0.7]})
    out = io.StringIO()
    with tq.monitor(q, feeder=workers, interval=0.05, file=out) as m:
        time.sleep(0.12)
        assert m.figures().workers_busy == pytest.approx(0.6)
    assert "workers busy 60%" in out.getvalue()
    per_worker_only = FakeWorkerFeeder(q, lambda: {"workers": 2, "worker_busy": [0.2, 0.4]})
    with tq.monitor(q, feeder=per_worker_only, interval=0.05, file=io.StringIO()) as m:
        assert m.figures().workers_busy == pytest.approx(0.3)


def test_workers_busy_from_a_real_feeder():
    """A Feeder over a map-style dataset reports its thread's busy share: the monitor shows it."""

    class Slow:
        def __len__(self):
            return 64 * 6

        def __getitem__(self, i):
            time.sleep(0.0005)
            return np.zeros(16, "float32")

    q = queue()
    with tq.Feeder(q, Slow(), progress={"interval": 0.05, "file": io.StringIO()}) as feeder:
        drain(q)
    assert feeder._monitor.figures().workers_busy is not None


def test_an_input_bound_feeder_that_waits_for_the_gil_is_named_with_what_helps():
    """A Feeder's thread that waits for the GIL most of the time: Python is the limit, and the verdict says so."""
    gil_bound = Figures(
        10.0, 500, 50.0, 1.2, 0.1, 3, model_waited=0.31, producers_waited=0.0, workers_busy=None, feeder_gil_wait=0.7
    )
    assert verdict(gil_bound).startswith("input-bound by the GIL: the model waited 31% of the time")
    assert "array dataset" in verdict(gil_bound) and "workers=N" in verdict(gil_bound)
    # Not input-bound, or a thread that rarely waits for the GIL: the usual verdicts.
    assert verdict(gil_bound._replace(model_waited=0.0)).startswith("compute-bound")
    assert verdict(gil_bound._replace(feeder_gil_wait=0.1)).startswith("input-bound: the model waited 31%")


def test_the_gil_share_comes_from_a_real_feeders_stats():
    q = tq.Queue([("x", "float32", (64, 16))], capacity=2, target="cpu")
    feeder = tq.Feeder(q, (BATCH for _ in range(40)))
    m = tq.Monitor(q, feeder=feeder, file=io.StringIO(), verdict=False)
    with feeder, m:
        for _ in range(40):
            q.get(timeout=20)
        figures = m.figures()
    assert figures.feeder_gil_wait is not None and 0.0 <= figures.feeder_gil_wait
