"""bench/ab.py, the A/B harness of two checkouts: its turns, what it reads of them and the figures it prints.

What is checked is the arithmetic and the plumbing a reader trusts the ratios for, never a time: the trees
take turns (AB BA ...), each turn's theano_queue is its tree's, the medians, spreads and new/old ratios are
those of the rounds' values, and a verdict needs the medians and the minimums to agree.  The turns run a
stand-in "Python" here that prints what a child prints.
"""

import json
import os
import stat
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:  # bench/ is a package of the checkout, not of the installed project
    sys.path.insert(0, ROOT)

from bench import ab, rounds  # noqa: E402


def test_summary_gives_the_median_the_range_and_the_quartiles_of_the_rounds():
    s = rounds.summary([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["q1"], s["q3"]) == (3.0, 1.0, 5.0, 2.0, 4.0)
    assert s["spread"] == 5.0 and s["rounds"] == 5
    assert rounds.summary([2.0])["q1"] == rounds.summary([2.0])["q3"] == 2.0  # one round: no error


def test_compare_divides_new_by_old_for_the_medians_the_minimums_and_each_round():
    row = rounds.compare(old=[1.0, 2.0, 10.0], new=[1.5, 3.0, 3.0], pairs=[(1.0, 1.5), (2.0, 3.0), (10.0, 3.0)])
    assert row["ratio"] == pytest.approx(3.0 / 2.0)
    assert row["ratio of mins"] == pytest.approx(1.5)
    assert row["paired"] == pytest.approx(1.5)  # the rounds' own ratios: 1.5, 1.5, 0.3
    assert row["old"]["median"] == 2.0 and row["new"]["max"] == 3.0
    assert rounds.compare([1.0], [1.0])["paired"] is None  # no round had both turns


@pytest.mark.parametrize(
    "old, new, verdict",
    [
        ([1.0, 1.0, 1.0], [1.05, 1.05, 1.05], "slower"),
        ([1.0, 1.0, 1.0], [0.9, 0.9, 0.9], "faster"),
        ([1.0, 1.0, 1.0], [1.01, 1.01, 1.01], ""),  # within 1.02 x: no verdict
        ([1.0, 1.0, 1.0], [0.95, 1.1, 1.1], ""),  # the median says slower, the minimum faster: none
    ],
)
def test_a_verdict_needs_the_medians_and_the_minimums_beyond_the_tolerance(old, new, verdict):
    assert rounds.compare(old, new, tolerance=0.02)["verdict"] == verdict


def test_no_verdict_is_given_on_fewer_than_three_rounds_a_side():
    assert rounds.compare([1.0, 1.0], [2.0, 2.0])["verdict"] == ""
    assert rounds.compare([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])["verdict"] == "slower"


def test_a_verdict_needs_the_rounds_own_ratios_to_agree_too():
    # Slower by the medians and the minimums, but round by round the new tree was as fast: the machine drifted.
    old, new = [1.0, 1.0, 1.2], [1.05, 1.05, 1.2]
    assert rounds.compare(old, new)["verdict"] == "slower"
    assert rounds.compare(old, new, pairs=[(1.0, 1.0), (1.0, 1.05), (1.2, 1.2)])["verdict"] == ""


def test_the_closing_lines_warn_when_a_control_moved_beyond_the_tolerance():
    def row(measure, ratio, control):
        return {
            "scenario": "small",
            "measure": measure,
            "control": control,
            "ratio": ratio,
            "ratio of mins": ratio,
            "verdict": "",
        }

    quiet = ab.verdicts([row("resident", 1.01, True), row("arrays", 1.0, False)], 0.02)
    assert not any(line.startswith("NOISE") for line in quiet)
    noisy = ab.verdicts([row("resident", 1.2, True), row("arrays", 1.0, False)], 0.02)
    assert any(line.startswith("NOISE") for line in noisy)


def test_interleave_runs_every_way_once_a_round_each_round_starting_one_further():
    ran = []
    ways = {name: (lambda name=name: ran.append(name) or 1.0) for name in "abc"}
    times = rounds.interleave(ways, 4)
    assert ran == list("abcbcacababc")
    assert times == {name: [1.0] * 4 for name in "abc"}


def test_the_trees_take_turns_old_first_then_new_first():
    assert [ab.turns(r) for r in range(4)] == [("old", "new"), ("new", "old")] * 2


def test_a_childs_path_puts_the_overlay_then_its_tree_and_drops_other_checkouts(tmp_path):
    other = tmp_path / "other"
    (other / "theano_queue").mkdir(parents=True)  # as .gpu/enter.sh puts the checkout it ran in first
    site = tmp_path / "site"
    site.mkdir()
    got = ab.python_path("/overlay", "/tree", os.pathsep.join([str(other), str(site), ""]))
    assert got.split(os.pathsep) == ["/overlay", "/tree", str(site)]


def test_parse_child_reads_the_last_marked_line_among_other_output():
    out = 'compiling...\nAB-RESULT {"a": 1}\nnoise\nAB-RESULT {"a": 2}\nbye\n'
    assert ab.parse_child(out) == {"a": 2}
    assert ab.parse_child("Traceback ...\n") is None


def child_result(tree, seconds, skipped=False):
    scenarios = {"put": {"measures": {"uint8 labels": seconds}}, "small": {"measures": {"resident": 2 * seconds}}}
    if skipped:
        scenarios["keras"] = {"skipped": "Keras does not import here"}
    return {"theano_queue": os.path.join(tree, "theano_queue"), "device": "cpu", "scenarios": scenarios}


def test_collect_and_rows_pair_each_measure_over_the_rounds_and_mark_the_controls():
    results = [
        {"old": child_result("/a", 1.0, skipped=True), "new": child_result("/b", 1.2)},
        {"new": child_result("/b", 1.2), "old": child_result("/a", 2.0)},
        {"old": {"error": "timed out after 300 s"}, "new": child_result("/b", 1.6)},
    ]
    values, notes = ab.collect(results)
    assert values[("put", "uint8 labels")] == {
        "old": [1.0, 2.0],
        "new": [1.2, 1.2, 1.6],
        "pairs": [(1.0, 1.2), (2.0, 1.2)],  # the third round's old turn failed: no pair
    }
    assert notes["keras"] == ["old skipped: Keras does not import here"]
    assert notes["turn"] == ["old: timed out after 300 s"]
    compared = ab.rows(values, 0.02)
    assert [(r["scenario"], r["measure"], r["control"]) for r in compared] == [
        ("small", "resident", True),
        ("put", "uint8 labels", False),
    ]
    put = compared[1]
    assert put["ratio"] == pytest.approx(1.2 / 1.5) and put["ratio of mins"] == pytest.approx(1.2)
    assert put["paired"] == pytest.approx((1.2 + 0.6) / 2)
    assert put["unit"] == "us/element" and put["old"]["values"] == [1.0, 2.0]


def test_check_tree_names_a_folder_that_is_no_checkout_and_one_not_built(tmp_path):
    with pytest.raises(SystemExit, match="not a theano_queue checkout"):
        ab.check_tree(str(tmp_path))
    (tmp_path / "theano_queue").mkdir()
    (tmp_path / "theano_queue" / "__init__.py").write_text("")
    with pytest.raises(SystemExit, match="no built engine.*--build"):
        ab.check_tree(str(tmp_path))


def test_an_unknown_scenario_is_refused_naming_the_known_ones(capsys):
    with pytest.raises(SystemExit):
        ab.main(["--old", ".", "--new", ".", "--scenarios", "lasagne,nope"])
    assert "unknown scenarios nope" in capsys.readouterr().err


# A stand-in for the turns' Python: it prints what a child prints, its tree read from its PYTHONPATH (the
# entry after the overlay), its figure from the tree's SECONDS file; a tree with a SLEEP file hangs.
STAND_IN = """#!%s
import json, os, sys, time
tree = os.environ["PYTHONPATH"].split(os.pathsep)[1]
assert sys.argv[1:5] == ["-P", "-m", "bench.ab", "--child"], sys.argv
assert os.path.isdir(os.path.join(os.environ["PYTHONPATH"].split(os.pathsep)[0], "bench"))
if os.path.exists(os.path.join(tree, "SLEEP")):
    time.sleep(60)
seconds = float(open(os.path.join(tree, "SECONDS")).read())
print("Theano says hello")
print("AB-RESULT " + json.dumps({"theano_queue": os.path.join(tree, "theano_queue"), "device": "cpu",
      "scenarios": {"put": {"measures": {"uint8 labels": seconds}}}}))
"""


def fake_tree(where, seconds):
    (where / "theano_queue").mkdir(parents=True)
    (where / "theano_queue" / "__init__.py").write_text("")
    (where / "theano_queue" / "_engine.cpython-311-x86_64-linux-gnu.so").write_text("")
    (where / "SECONDS").write_text(str(seconds))
    return str(where)


def test_a_run_of_two_trees_writes_each_trees_figures_and_the_ratio(tmp_path, capsys):
    python = tmp_path / "python"
    python.write_text(STAND_IN % sys.executable)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    old, new = fake_tree(tmp_path / "old", 0.001), fake_tree(tmp_path / "new", 0.0011)
    out = tmp_path / "ab.json"
    argv = ["--old", old, "--new", new, "--rounds", "3", "--scenarios", "put", "--python", str(python)]
    assert ab.main(argv + ["--json", str(out)]) == 0
    record = json.loads(out.read_text())
    (row,) = record["compared"]
    assert row["old"]["values"] == [0.001] * 3 and row["new"]["values"] == [0.0011] * 3
    assert row["ratio"] == pytest.approx(1.1) and row["verdict"] == "slower"
    assert [list(turn) for turn in record["rounds"]] == [["old", "new"], ["new", "old"], ["old", "new"]]
    printed = capsys.readouterr().out
    assert "1000 [1000-1000]" in printed and "1100 [1100-1100]" in printed and "1.100" in printed


def test_a_turn_that_hangs_is_ended_and_reported_and_the_rounds_go_on(tmp_path, capsys):
    python = tmp_path / "python"
    python.write_text(STAND_IN % sys.executable)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    old, new = fake_tree(tmp_path / "old", 0.001), fake_tree(tmp_path / "new", 0.001)
    (tmp_path / "new" / "SLEEP").write_text("")
    argv = ["--old", old, "--new", new, "--rounds", "2", "--scenarios", "put", "--python", str(python)]
    assert ab.main(argv + ["--timeout", "2"]) == 1  # nothing to compare: the new tree never answered
    printed = capsys.readouterr().out
    assert "round 2/2" in printed and "new: timed out after 2 s" in printed


def test_turn_seconds_are_the_medians_of_what_each_scenario_and_each_turn_took():
    results = [
        {"old": {"seconds": 10.0, "scenarios": {"put": {"seconds": 2.0}}}, "new": {"seconds": 12.0, "scenarios": {}}},
        {"new": {"seconds": 14.0, "error": "timed out", "scenarios": {}}, "old": {"seconds": 30.0, "scenarios": {}}},
    ]
    assert ab.turn_seconds(results) == {"turn": 13.0, "put": 2.0}


def test_the_closing_lines_say_when_too_few_rounds_allow_no_verdict():
    (row,) = ab.rows({("put", "uint8 labels"): {"old": [1.0, 1.0], "new": [2.0, 2.0], "pairs": []}}, 0.02)
    assert row["verdict"] == ""
    assert any(line.startswith("fewer than 3 rounds") for line in ab.verdicts([row], 0.02))
