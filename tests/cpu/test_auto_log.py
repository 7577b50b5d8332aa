"""What the auto knobs decided, in one place (issue 44.3): feeder.stats()["auto"], the monitor's line,
a trace's counters and ``theano-queue trace``."""

import io
import json

import numpy as np

import theano_queue as tq
from theano_queue.feed.autotune import AutoLog, initial_values, summary_of
from theano_queue.tools.cli import main
from theano_queue.tools.trace import auto_of, auto_timeline, format_timeline

BATCH = np.zeros((4, 3), "float32")


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def decided():
    """A log where workers went 2 -> 4 at 1.5 s and capacity 2 -> 4 at 3 s."""
    clock = FakeClock()
    log = AutoLog(clock)
    log.set("workers", 2), log.set("capacity", 2)
    clock.t += 1.5
    log.change("workers", 4, "model waited 40%, workers busy 97%")
    clock.t += 1.5
    log.change("capacity", 4, "model waited 8%, ring full 30%")
    return log


def test_the_log_says_current_values_last_change_and_history():
    auto = decided().as_dict()
    assert auto["workers"] == 4 and auto["capacity"] == 4
    assert auto["last_change"] == "+2 capacity: model waited 8%, ring full 30%"
    assert [h[:4] for h in auto["history"]] == [(1.5, "workers", 2, 4), (3.0, "capacity", 2, 4)]
    assert initial_values(auto) == {"workers": 2, "capacity": 2}
    assert summary_of(auto) == "auto: capacity 4, 4 workers; +2 capacity: model waited 8%, ring full 30%"


def test_timeline_rows_and_plot():
    rows = auto_timeline(decided().as_dict())
    assert [(r["t"], r["values"]) for r in rows] == [
        (0.0, {"workers": 2, "capacity": 2}),
        (1.5, {"workers": 4, "capacity": 2}),
        (3.0, {"workers": 4, "capacity": 4}),
    ]
    assert rows[1]["change"] == "+2 workers: model waited 40%, workers busy 97%"
    text = format_timeline(rows, width=20)
    assert "start" in text and "+2 workers: model waited 40%" in text
    plots = [line for line in text.splitlines() if line.startswith(("workers ", "capacity "))]
    assert len(plots) == 2 and all("max 4" in p for p in plots)


def test_feeder_stats_carry_the_queue_log_and_the_monitor_line_shows_it():
    q = tq.Queue([("x", "float32", (4, 3))], capacity=2, target="cpu", name="tuned")
    plain = tq.Feeder(q, [BATCH])
    assert "auto" not in plain.stats()  # nothing tuned: nothing said, nothing paid
    log = q.port.auto_log()
    log.set("capacity", 2)
    log.change("capacity", 3, "model waited 9%, ring full 40%")
    out = io.StringIO()
    with tq.Feeder(q, [BATCH] * 3, progress={"file": out, "interval": 0.02}) as feeder:
        assert feeder.stats()["auto"]["last_change"] == "+1 capacity: model waited 9%, ring full 40%"
        for _ in range(3):
            q.get()
    assert "auto: capacity 3; +1 capacity: model waited 9%, ring full 40%" in out.getvalue()


def test_a_queue_trace_has_the_knobs_as_counters_and_the_cli_prints_them(tmp_path, capsys):
    q = tq.Queue([("x", "float32", (4, 3))], capacity=2, target="cpu", name="traced")
    log = q.port.auto_log()
    log.set("capacity", 2)
    log.change("capacity", 4, "model waited 9%, ring full 40%")
    path = tmp_path / "q.json"
    with q.trace(str(path), steps=2):
        q.put(BATCH), q.get()
    document = json.loads(path.read_text())
    counters = [e for e in document["traceEvents"] if e["ph"] == "C"]
    assert [e["args"] for e in counters] == [{"capacity": 2}, {"capacity": 4}]
    assert auto_of(document)["capacity"] == 4
    assert main(["trace", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "+2 capacity: model waited 9%, ring full 40%" in printed and "capacity |" in printed
    saved = tmp_path / "auto.json"
    log.save(str(saved))
    assert main(["trace", str(saved)]) == 0


def test_cli_trace_says_what_a_file_lacks(tmp_path, capsys):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"workers": 2, "busy": 0.5}))
    assert main(["trace", str(path)]) == 1
    assert "holds no auto history" in capsys.readouterr().err
    assert main(["trace", str(tmp_path / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().err
