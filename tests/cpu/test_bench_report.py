"""doc/benchmarks.rst, as bench/report.py writes it: what a reader of the docs sees."""

import importlib.util
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# An absolute path of the machine that ran the benchmarks: /tmp/..., /root/..., /home/...
MACHINE_PATH = re.compile(r"(?<![\w.])/(tmp|root|home|work|usr|opt|var)/")


def report_module():
    spec = importlib.util.spec_from_file_location("bench_report", os.path.join(ROOT, "bench", "report.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_page_names_no_path_of_the_benchmark_machine():
    with open(os.path.join(ROOT, "doc", "benchmarks.rst")) as f:
        page = f.read()
    assert not MACHINE_PATH.findall(page), [line for line in page.splitlines() if MACHINE_PATH.search(line)]


def test_the_report_writer_leaves_out_the_machines_paths(monkeypatch):
    report = report_module()
    monkeypatch.setattr(report, "chart", lambda run, path: True)  # no picture written by a test
    with open(os.path.join(ROOT, "doc", "bench", "results.json")) as f:
        run = json.load(f)
    run["command"] = "/tmp/gpu-root/usr/bin/python3.11 bench/run.py --only 9 --out /root/out/after.json"
    page = report.render(run)
    assert "python bench/run.py --only 9 --out after.json" in page
    assert not MACHINE_PATH.findall(page)


def test_a_cost_within_the_noise_is_a_spread_not_a_negative_cost():
    """bench --quick's scenario 10 said -38 % and -50 %: a watched step is never cheaper than an unwatched one."""
    cost = report_module().cost_with_spread
    assert cost([-38.0, 4.0, 12.5]) == "no cost above the noise (rounds -38.0 to +12.5 %)"
    assert cost([-50.0, -20.0, -1.0]) == "no cost above the noise (rounds -50.0 to -1.0 %)"
    assert cost([0.4, 1.5, 0.9]) == "+0.90 % (rounds +0.4 to +1.5 %)"


def test_the_quoted_small_step_figure_is_the_scenarios_own_ratio():
    """Scenario 19's headline ratio (since 36f8812 the median of each round's ratio to its own resident step) is
    what the guides quote, not its rows' best round."""
    report = report_module()
    rows = [{"step": "256x784", "part": "array", "x resident": 1.02, "x resident, paired": 1.11}]
    run = {"scenarios": [{"number": 19, "rows": rows, "ratios": {"256x784 array": 1.11}}]}
    assert report.quoted(run)["small_step_array"] == "1.11 x"
