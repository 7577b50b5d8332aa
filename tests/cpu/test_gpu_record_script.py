"""scripts/gpu_record.sh: one device call's part of the benchmark record, one results file whatever it ran."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def record_part(tmp_path, *groups, budget=560):
    env = dict(os.environ, PY=sys.executable, OUT=str(tmp_path), BUDGET=str(budget), BENCH_ARGS="--quick")
    return subprocess.run(
        ["bash", "scripts/gpu_record.sh", "p", *groups], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_each_group_runs_in_its_own_process_into_the_parts_one_file(tmp_path):
    done = record_part(tmp_path, "9", "13")
    assert done.returncode == 0, done.stdout + done.stderr
    part = json.loads((tmp_path / "p.json").read_text())
    assert [s["number"] for s in part["scenarios"]] == [9, 13]
    assert len(part["merged"]) == 1 and "--only 13 " in part["merged"][0]["command"]  # the second process
    assert "[9] CPU target" in done.stdout and "== 13: exit 0" in done.stdout
    assert sorted(os.listdir(tmp_path)) == ["p.json", "p.log"]  # the device tool brings back few files


def test_a_group_with_no_time_left_is_named_and_fails_the_part(tmp_path):
    done = record_part(tmp_path, "9", budget=10)
    assert done.returncode == 1
    assert "not measured, out of time: 9" in done.stdout
