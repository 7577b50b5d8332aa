"""Queue.trace: the per-element timeline and its Chrome trace-event JSON file."""

import json
import threading
import time

import numpy as np
import pytest
import theano
from trace_helpers import CHAIN, check_causal

import theano_queue as tq
from theano_queue.tools.trace import EVENTS, STAGES


def small_queue(capacity=2, name="traced"):
    return tq.Queue([("x", "float32", (4, 3)), ("n", "int64", ())], capacity=capacity, target="cpu", name=name)


def element(i):
    return np.full((4, 3), i, "float32"), np.int64(i)


def test_trace_file_is_chrome_json_with_documented_fields(tmp_path):
    q = small_queue()
    x, n = q.dequeue()
    step = theano.function([], [x.sum(), n])
    path = tmp_path / "trace.json"
    with tq.Feeder(q, (element(i) for i in range(12))):
        with q.trace(str(path), steps=5) as trace:
            for i in range(8):
                assert int(step()[1]) == i
                time.sleep(0.002)
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ms"
    other = data["otherData"]
    assert other["queue"] == "traced" and other["target"] == "cpu" and other["steps"] == 5
    assert other["clock"] == "CLOCK_MONOTONIC" and other["events"] == list(EVENTS)
    assert len(other["elements"]) == 5 and other["elements"] == trace.elements
    events = data["traceEvents"]
    for event in events:
        assert {"name", "ph", "pid", "tid"} <= set(event), event
    instants = [e for e in events if e["ph"] == "i"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["name"] for e in instants} == set(EVENTS) - {"filled"}
    for e in instants + spans:
        assert isinstance(e["ts"], float) and set(e["args"]) == {"element", "slot"}
    for e in spans:
        assert e["dur"] >= 0 and e["cat"] in {stage for stage, _, _ in STAGES}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"events", "write", "in queue", "wait for input", "read"} <= names
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in events)


def test_each_element_events_are_in_causal_order_and_bounded():
    q = small_queue(capacity=3)
    with tq.Feeder(q, (element(i) for i in range(40))):
        with q.trace(steps=10) as trace:
            for _ in range(30):
                q.get()
    assert [e["element"] for e in trace.elements] == list(
        range(trace.elements[0]["element"], trace.elements[0]["element"] + 10)
    )
    for e in trace.elements:
        assert set(e["ns"]) == set(EVENTS) - {"filled"}
        check_causal(e["ns"])
        assert e["slot"] == e["element"] % 3
    # The instants of one element in the file, ordered by time, follow the chain too.
    first = trace.elements[0]["element"]
    times = {
        ev["name"]: ev["ts"]
        for ev in trace.chrome()["traceEvents"]
        if ev["ph"] == "i" and ev["args"]["element"] == first
    }
    ordered = sorted((name for name in times if name in CHAIN), key=lambda name: (times[name], CHAIN.index(name)))
    assert ordered == CHAIN


def test_a_wait_for_room_counts_from_the_first_attempt():
    """A put blocked on a full queue waits in slices; the trace's put_begin is when it was called."""
    q = small_queue(capacity=1)
    q.put(*element(0))
    with q.trace(steps=2) as trace:
        called = []

        def producer():
            called.append(time.monotonic_ns())
            q.put(*element(1))  # waits about 0.3 s for room, in 50 ms slices

        t = threading.Thread(target=producer)
        t.start()
        time.sleep(0.3)
        q.get()
        t.join()
        q.get()
    (e,) = trace.elements
    assert e["ns"]["reserved"] - e["ns"]["put_begin"] >= 0.25e9
    assert abs(e["ns"]["put_begin"] - called[0]) < 0.02e9


def test_trace_arguments_and_repeated_use():
    q = small_queue()
    with pytest.raises(ValueError, match="steps"):
        q.trace(steps=0)
    assert q.trace(steps=1).stop() == []  # never started
    for round_ in range(2):
        with q.trace(steps=1) as trace:
            q.put(*element(round_))
            q.get()
        assert len(trace.elements) == 1
        check_causal(trace.elements[0]["ns"])
    assert "1 elements" in repr(trace)
