"""bench/run.py --join: the figures of record, measured in several calls of one machine, as one record (issue 43.6).

A GPU machine lent for 10 minutes a call runs the scenarios over several calls, each part its own results
file; the reader of doc/benchmarks.rst must still see one machine, every scenario once and every command
that measured them.
"""

import json
import os

import pytest

from bench import record, report, run

MACHINE = "Intel(R) Xeon(R) Processor (16 cores), NVIDIA H100 80GB HBM3"


def part(tmp_path, name, numbers, date, machine=MACHINE, merged=(), figure=1.0):
    """A results file as bench/run.py --only writes it (with --merge: the later processes under "merged")."""
    path = tmp_path / name
    record = {
        "machine": machine,
        "device": "cuda0",
        "date": date,
        "command": "/tmp/gpu-root/usr/bin/python3.11 bench/run.py --only %s --out /root/out/%s" % (numbers[0], name),
        "copy_threads": 16,
        "scenarios": [{"number": n, "title": "scenario %s" % n, "headline": "figure %s" % figure} for n in numbers],
    }
    if merged:
        record["merged"] = [
            {
                "command": "python3.11 bench/run.py --only %s --merge" % n,
                "date": date,
                "machine": machine,
                "scenarios": [n],
            }
            for n in merged
        ]
    path.write_text(json.dumps(record))
    return str(path)


def test_parts_of_one_machine_join_into_one_record_with_every_scenario_once_in_order(tmp_path):
    first = part(tmp_path, "a.json", [4, 1, 6], "2026-12-05 19:21 UTC", figure=1.0)
    second = part(tmp_path, "b.json", [6, 3.5, 20], "2026-12-05 19:33 UTC", merged=[3.5, 20], figure=2.0)
    joined = record.joined([first, second])
    assert [s["number"] for s in joined["scenarios"]] == [1, 3.5, 4, 6, 20]
    assert next(s for s in joined["scenarios"] if s["number"] == 6)["headline"] == "figure 2.0"  # the later part's
    assert (joined["machine"], joined["device"], joined["copy_threads"]) == (MACHINE, "cuda0", 16)
    assert "merged" not in joined  # one machine: nothing is told apart
    assert joined["date"] == "2026-12-05 19:21 UTC to 2026-12-05 19:33 UTC"
    commands = joined["command"].splitlines()
    assert len(commands) == 4 and "--only 4 " in commands[0] and "--only 6 " in commands[1]
    assert commands[2:] == ["python3.11 bench/run.py --only 3.5 --merge", "python3.11 bench/run.py --only 20 --merge"]


def test_parts_of_another_machine_are_refused_naming_both(tmp_path):
    first = part(tmp_path, "a.json", [1], "2026-12-05 19:21 UTC")
    other = part(tmp_path, "b.json", [2], "2026-12-05 19:22 UTC", machine="x86_64 (2 cores), no GPU")
    with pytest.raises(ValueError) as refused:
        record.joined([first, other])
    message = str(refused.value)
    assert "--join" in message and "b.json" in message and "a.json" in message
    assert "x86_64 (2 cores), no GPU" in message and MACHINE in message


def test_a_part_merged_from_another_machine_is_refused(tmp_path):
    first = part(tmp_path, "a.json", [1], "2026-12-05 19:21 UTC")
    mixed = json.loads(open(part(tmp_path, "b.json", [2], "2026-12-05 19:22 UTC", merged=[2])).read())
    mixed["merged"][0]["machine"] = "NVIDIA H200"
    (tmp_path / "b.json").write_text(json.dumps(mixed))
    with pytest.raises(ValueError, match="NVIDIA H200"):
        record.joined([first, str(tmp_path / "b.json")])


def test_the_command_line_joins_the_parts_into_the_record_it_is_given(tmp_path):
    first = part(tmp_path, "a.json", [1], "2026-12-05 19:21 UTC")
    second = part(tmp_path, "b.json", [2], "2026-12-05 19:22 UTC")
    out = tmp_path / "results.json"
    run.main(["--join", first, second, "--out", str(out), "--no-report"])
    assert [s["number"] for s in json.loads(out.read_text())["scenarios"]] == [1, 2]


def test_the_page_lists_every_command_of_a_joined_record_one_a_line_without_the_machines_paths(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "chart", lambda record, path: True)  # no picture written by a test
    with open(os.path.join(os.path.dirname(report.__file__), "..", "doc", "bench", "results.json")) as f:
        record = json.load(f)
    record.pop("merged", None)
    record["command"] = "\n".join(
        "/tmp/gpu-root/usr/bin/python3.11 bench/run.py --only %s --out /root/out/%s.json" % (n, n) for n in ("1,2", "4")
    )
    page = report.render(record)
    assert "   python bench/run.py --only 1,2 --out 1,2.json\n   python bench/run.py --only 4 --out 4.json\n" in page


def test_a_scenario_asked_for_alone_also_runs_the_scenarios_whose_results_it_reads():
    """--only 6 died with "'Bench' object has no attribute 'balanced'": the peer reads scenario 3's step, and
    2, 3 and 3.5 read scenario 1's pinned limit."""
    numbers = lambda only: [fn.number for fn in run.chosen(only)]  # noqa: E731
    assert numbers({6}) == [1, 3, 6]
    assert numbers({2}) == [1, 2] and numbers({3.5}) == [1, 3.5]
    assert numbers({19, 4}) == [4, 19]
    assert numbers(set()) == [fn.number for fn in run.SCENARIOS]
