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


def test_no_ratio_on_the_benchmarks_page_is_rounded_to_zero():
    """Scenario 13's lent dequeue is 0.0012 x the copying function: the page said "0.00 x", which reads as broken."""
    with open(os.path.join(ROOT, "doc", "benchmarks.rst")) as f:
        page = f.read()
    assert not re.findall(r"(?<![\d.])0\.0+ x\b", page)


def test_the_handoff_headline_keeps_the_figures_of_a_ratio_far_under_one(monkeypatch):
    import numpy as np

    from bench import arrays_bench

    class Quick:
        quick = True
        rng = np.random.default_rng(0)

    # fed and given seconds, x.sum() then x returned: the recorded run's figures
    seconds = iter([0.0155, 0.0166, 0.0000204, 0.0171])
    monkeypatch.setattr(arrays_bench, "best_of", lambda measure: next(seconds))
    headline = arrays_bench.cpu_handoff(Quick())["headline"]
    assert headline.endswith(", 0.00119 x (x returned)"), headline


def test_a_merge_of_one_scenario_names_it_in_the_singular(monkeypatch):
    report = report_module()
    monkeypatch.setattr(report, "chart", lambda run, path: True)
    with open(os.path.join(ROOT, "doc", "bench", "results.json")) as f:
        run = json.load(f)
    merge = {"command": "python bench/run.py --only 20 --merge", "date": "d", "machine": "m", "scenarios": [20]}
    run["merged"] = [merge]
    page = report.render(run)
    assert "Scenario 20 measured on m, d, with::" in page
