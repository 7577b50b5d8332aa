"""A timeline of a queue's elements, written as Chrome trace-event JSON.

::

    with q.trace("queue.json", steps=50):     # the next 50 elements put
        for _ in range(100):
            train_step()

Open the file in https://ui.perfetto.dev or chrome://tracing.  The engine
records one CLOCK_MONOTONIC timestamp per event and element (``put_begin``,
``reserved``, ``put_end``, ``copy_issued``, ``ready``, ``filled``,
``get_begin``, ``dequeued``, ``consumed``: c_code/engine/core/tq_trace.h says what each
means); recording stops by itself after ``steps`` elements.  When no trace
runs, the engine's hooks cost one atomic load each.

The file is a JSON object:

``traceEvents``
    Chrome trace events, all with ``pid`` 1 (the queue):

    * one *instant* event (``"ph": "i"``) per recorded timestamp: ``name`` is
      the event, ``ts`` the time in microseconds of the monotonic clock (the
      clock of ``time.monotonic()``), ``tid`` 0, ``args`` ``{"element": n,
      "slot": s}``;
    * one *complete* event (``"ph": "X"``, ``ts`` and ``dur`` in
      microseconds) per stage an element went through, on a row of its own:
      ``wait for room`` (put_begin to reserved), ``write`` (reserved to
      put_end), ``copy to device`` (copy_issued to filled, GPU queues),
      ``in queue`` (ready to dequeued), ``wait for input`` (get_begin to
      dequeued), ``read`` (dequeued to consumed).  Stages of different
      elements that overlap go on numbered rows of the same stage;
    * metadata events (``"ph": "M"``) naming the process and the rows.
    * where a knob of the queue is set to ``"auto"`` (``Queue(capacity="auto")``,
      ``Feeder(workers="auto")``), one *counter* event (``"ph": "C"``) per
      tuned knob at the log's start and at each of its changes: Perfetto
      draws each knob's value over time.
``displayTimeUnit``
    ``"ms"``.
``otherData``
    ``queue``, ``target``, ``steps``, ``clock`` (``"CLOCK_MONOTONIC"``),
    ``events`` (the event names, in causal order where they are causally
    ordered) and ``elements``: one ``{"element", "slot", "ns": {event: ns}}``
    per recorded element; ``auto``, the queue's AutoLog as ``feeder.stats()["auto"]``
    holds it, where a knob is tuned.

``theano-queue trace FILE`` prints the tuned knobs over time from such a file,
from a file of ``feeder.stats()`` or ``feeder.stats()["auto"]`` saved as JSON,
or from ``AutoLog.save``'s.
"""

import json
from typing import Any, Dict, List, Optional

from .. import _engine
from ..feed.autotune import initial_values

#: Event names in the engine's order.  For every element put_begin <= reserved
#: <= put_end <= copy_issued <= ready <= dequeued <= consumed, copy_issued <=
#: filled and get_begin <= dequeued.
EVENTS = tuple(_engine.TRACE_EVENTS)

#: The stages drawn as spans: (row name, start event, end event).
STAGES = (
    ("wait for room", "put_begin", "reserved"),
    ("write", "reserved", "put_end"),
    ("copy to device", "copy_issued", "filled"),
    ("in queue", "ready", "dequeued"),
    ("wait for input", "get_begin", "dequeued"),
    ("read", "dequeued", "consumed"),
)


class Trace:
    """Records the timeline of the next ``steps`` elements of a queue (see :meth:`theano_queue.Queue.trace`).

    A context manager: recording starts on entry and stops on exit, which
    writes ``path`` (when given).  :attr:`elements` holds what was recorded.
    """

    def __init__(self, queue: Any, path: Optional[str] = None, steps: int = 100) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError("Queue.trace(%s): steps must be an int >= 1, got %r" % (queue.name, steps))
        self.queue = queue
        self.path = path
        self.steps = steps
        #: One dict per recorded element, in element order: ``element``,
        #: ``slot`` and ``ns`` (event name -> CLOCK_MONOTONIC nanoseconds).
        self.elements: List[Dict[str, Any]] = []
        self._recording = False

    def __repr__(self) -> str:
        return "<Trace of queue %r, %d steps, %s>" % (
            self.queue.name,
            self.steps,
            "recording" if self._recording else "%d elements" % len(self.elements),
        )

    def start(self) -> "Trace":
        """Start recording the next ``steps`` elements put into the queue."""
        self.queue.port.ring.trace_start(self.steps)
        self._recording = True
        return self

    def stop(self) -> List[Dict[str, Any]]:
        """Stop recording; returns :attr:`elements`."""
        if self._recording:
            self._recording = False
            self.elements = [
                {"element": element, "slot": slot, "ns": {name: ns for name, ns in zip(EVENTS, times) if ns >= 0}}
                for element, slot, times in self.queue.port.ring.trace_stop()
            ]
        return self.elements

    def __enter__(self) -> "Trace":
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop()
        if self.path is not None:
            self.save(self.path)

    def chrome(self) -> Dict[str, Any]:
        """The recorded timeline as a Chrome trace-event JSON object (a dict)."""
        events = [
            {
                "name": "process_name",
                "ph": "M",
                "pid": 1,
                "tid": 0,
                "args": {"name": "queue %r (%s)" % (self.queue.name, self.queue.target)},
            },
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "events"}},
        ]
        for e in self.elements:
            args = {"element": e["element"], "slot": e["slot"]}
            for name in EVENTS:
                if name in e["ns"]:
                    events.append(
                        {
                            "name": name,
                            "cat": "event",
                            "ph": "i",
                            "s": "t",
                            "ts": e["ns"][name] / 1e3,
                            "pid": 1,
                            "tid": 0,
                            "args": args,
                        }
                    )
        for row, (stage, start, end) in enumerate(STAGES, 1):
            lanes: List[int] = []  # the end time of the last span on each lane of this stage
            spans = sorted(
                (e for e in self.elements if start in e["ns"] and end in e["ns"]),
                key=lambda e: (e["ns"][start], e["element"]),
            )
            for e in spans:
                begin_ns, end_ns = e["ns"][start], e["ns"][end]
                lane = next((i for i, busy_until in enumerate(lanes) if busy_until <= begin_ns), len(lanes))
                if lane == len(lanes):
                    lanes.append(0)
                    tid = 100 * row + lane
                    events.append(
                        {
                            "name": "thread_name",
                            "ph": "M",
                            "pid": 1,
                            "tid": tid,
                            "args": {"name": stage if lane == 0 else "%s (%d)" % (stage, lane + 1)},
                        }
                    )
                    events.append(
                        {"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": {"sort_index": tid}}
                    )
                lanes[lane] = end_ns
                events.append(
                    {
                        "name": "%s #%d" % (stage, e["element"]),
                        "cat": stage,
                        "ph": "X",
                        "ts": begin_ns / 1e3,
                        "dur": (end_ns - begin_ns) / 1e3,
                        "pid": 1,
                        "tid": 100 * row + lane,
                        "args": {"element": e["element"], "slot": e["slot"]},
                    }
                )
        auto = self.queue.port.auto
        if auto is not None:
            events += auto_counters(auto.as_dict(), auto.started)
        return {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {
                "queue": self.queue.name,
                "target": self.queue.target,
                "steps": self.steps,
                "clock": "CLOCK_MONOTONIC",
                "events": list(EVENTS),
                "elements": self.elements,
                **({"auto": auto.as_dict()} if auto is not None else {}),
            },
        }

    def save(self, path: str) -> None:
        """Write :meth:`chrome` to ``path``."""
        with open(path, "w") as f:
            json.dump(self.chrome(), f)


# ---- the tuned knobs over time (theano-queue trace) ---------------------------------------------


def auto_timeline(auto: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every state of the tuned knobs, from an AutoLog's ``as_dict()``: ``{"t", "values", "change"}`` rows, the
    first at 0 with the starting values (``change`` None), then one a change."""
    values = initial_values(auto)
    rows = [{"t": 0.0, "values": dict(values), "change": None}]
    for t, knob, old, new, reason in auto.get("history", []):
        values[knob] = new
        rows.append({"t": float(t), "values": dict(values), "change": "%+d %s: %s" % (new - old, knob, reason)})
    return rows


def auto_counters(auto: Dict[str, Any], started_s: float) -> List[Dict[str, Any]]:
    """Chrome counter events of the tuned knobs, at monotonic time ``started_s`` + each row's ``t``."""
    return [
        {"name": "auto " + knob, "ph": "C", "ts": (started_s + row["t"]) * 1e6, "pid": 1, "args": {knob: value}}
        for row in auto_timeline(auto)
        for knob, value in row["values"].items()
    ]


def auto_of(document: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The AutoLog dict in a file's JSON: a chrome trace's ``otherData.auto``, ``feeder.stats()``'s ``auto``, or
    the dict itself (it has a ``history``); None when there is none."""
    if not isinstance(document, dict):
        return None
    for found in (document.get("otherData", {}).get("auto"), document.get("auto"), document):
        if isinstance(found, dict) and isinstance(found.get("history"), list):
            return found
    return None


def format_timeline(rows: List[Dict[str, Any]], width: int = 40) -> str:
    """The knobs over time as text: a table of every state, then one step plot per knob (``width`` columns)."""
    knobs = sorted({k for row in rows for k in row["values"]})
    lines = ["%8s  %s  change" % ("t (s)", "  ".join("%8s" % k for k in knobs))]
    for row in rows:
        cells = "  ".join("%8s" % row["values"].get(k, "") for k in knobs)
        lines.append("%8.2f  %s  %s" % (row["t"], cells, row["change"] or "start"))
    end = max(row["t"] for row in rows) or 1.0
    for knob in knobs:
        series = [(row["t"], row["values"][knob]) for row in rows if knob in row["values"]]
        top = max(v for _t, v in series) or 1
        plot = []
        for column in range(width):
            at = end * column / max(width - 1, 1)
            value = [v for t, v in series if t <= at][-1]
            plot.append(" _.-=*#"[min(6, round(6 * value / top))])
        lines.append("%-8s |%s| 0..%.1f s, max %d" % (knob, "".join(plot), end, top))
    return "\n".join(lines)
