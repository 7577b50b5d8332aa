"""A/B of two checkouts on the real paths: the trees take turns, each turn a fresh process (issues 42.6, 43.6).

    python bench/ab.py --old /tmp/old --new . --rounds 5 [--scenarios lasagne,put] [--json ab.json]
    python bench/ab.py --old /tmp/old --new . --build --quick --json $OUT/ab.json    # the GPU machine's call

Each tree is a checkout with its engine built in place (``--build`` builds both first:
``setup.py -q build_ext --inplace``).  A round runs one process per tree, old then new, the next round new
then old (AB BA AB ...: neither tree always meets the machine first); a process imports ``theano_queue`` from
its tree and the scenarios' code from this checkout's ``bench/`` (the same measuring code for both), runs every
scenario once and prints its figures.  Printed per measure: each tree's median over the rounds with the
rounds' min-max, new/old of the medians, of the minimums and paired (the median of each round's own new/old),
and a verdict where all three pass 1.02 (or fall under 0.98).  Measures that do not touch the queue (the
scripts' own loops, a resident batch) are the controls: their ratios show the noise floor of the run, and a
line starting NOISE says when it is above the tolerance.  The JSON holds every round's figures.

The scenarios (seconds per unit, smaller is better; Theano's device decides GPU or CPU, and ``put`` runs a
host queue too on a GPU):

lasagne  Lasagne's MNIST MLP (bench/lasagne_mlp.py): its own loop and givens (controls), the array dataset
         with uint8 labels, the generator Feeder, the held dataset (GPU)
small    a 500x784 step of hidden 16 (bench/common.py's MLP): resident (control), array dataset with uint8
         labels, generator Feeder, held dataset (GPU)
put      ``q.put(x, y)`` of 500x784 float32 with uint8 labels into uint8 and int32 components, each put taken
         by a dequeue step
workers  map-style ``__getitem__`` workers, 2 and 8 (bench/workers_bench.py's Augment pipeline)
keras    Keras 2.3.1's MLP (bench/keras_bench.py): its own ``fit`` (control) against the queue; skipped, saying
         why, where Keras does not import
"""

if __name__ == "__main__" and not __package__:
    # `python bench/ab.py` runs this module as `python -m bench.ab` does, from the checkout's root (as bench/run.py).
    import os
    import runpy
    import sys

    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runpy.run_module("bench.ab", run_name="__main__", alter_sys=True)
    sys.exit(0)

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench.rounds import compare

HERE = os.path.dirname(os.path.abspath(__file__))
#: What a child prints before its JSON: the one line the parent reads of its output.
MARK = "AB-RESULT "
SCENARIOS = ("lasagne", "small", "put", "workers", "keras")
#: Measures that run no queue code: the same in both trees, so their ratios are the run's noise floor.
CONTROLS = {("lasagne", "own loop"), ("lasagne", "givens"), ("small", "resident"), ("keras", "fit")}
UNITS = {"lasagne": "us/step", "small": "us/step", "put": "us/element", "workers": "us/sample", "keras": "us/step"}


# ---- the parent: trees, processes, rounds ---------------------------------------------------------------


def check_tree(tree):
    """The checkout's absolute path; a clear error where it holds no theano_queue or no built engine."""
    tree = os.path.abspath(tree)
    if not os.path.isfile(os.path.join(tree, "theano_queue", "__init__.py")):
        raise SystemExit("bench/ab.py: %s is not a theano_queue checkout (no theano_queue/__init__.py)" % tree)
    if not glob.glob(os.path.join(tree, "theano_queue", "_engine*.so")):
        raise SystemExit(
            "bench/ab.py: %s has no built engine: run `python setup.py -q build_ext --inplace` there, "
            "or pass --build" % tree
        )
    return tree


def build(tree, python):
    """The engine built in place in ``tree``; raises SystemExit naming the tree when the build fails."""
    began = time.perf_counter()
    done = subprocess.run([python, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree)
    if done.returncode != 0:
        raise SystemExit("bench/ab.py: the build in %s failed (exit %d)" % (tree, done.returncode))
    print("built %s in %.0f s" % (tree, time.perf_counter() - began), flush=True)


def overlay_dir():
    """A folder holding only ``bench`` (a link to this checkout's): first on a child's path, so the scenarios'
    code is this checkout's for both trees, while ``theano_queue`` still comes from the tree after it."""
    where = tempfile.mkdtemp(prefix="tq-ab-")
    os.symlink(HERE, os.path.join(where, "bench"))
    return where


def python_path(overlay, tree, inherited):
    """A child's PYTHONPATH: the overlay, the tree, then the inherited entries that hold no theano_queue
    (.gpu/enter.sh puts the checkout it was sourced in first: it must not shadow the tree)."""
    kept = [p for p in (inherited or "").split(os.pathsep) if p and not os.path.isdir(os.path.join(p, "theano_queue"))]
    return os.pathsep.join([overlay, tree] + kept)


def child_command(python, config):
    """The argv of one turn: this module run by name (-P: no current folder on the path)."""
    return [python, "-P", "-m", "bench.ab", "--child", json.dumps(config)]


def parse_child(stdout):
    """The child's result: the JSON after the last MARK line, or None when it printed none."""
    found = None
    for line in stdout.splitlines():
        if line.startswith(MARK):
            found = json.loads(line[len(MARK) :])
    return found


def run_turn(python, tree, overlay, config, timeout):
    """One process on ``tree``: its parsed result, or {"error": ...} saying how it failed."""
    env = dict(os.environ, PYTHONPATH=python_path(overlay, tree, os.environ.get("PYTHONPATH")))
    env.setdefault("PYTHONWARNINGS", "ignore")
    began = time.perf_counter()
    proc = subprocess.Popen(
        child_command(python, config),
        cwd=overlay,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its worker processes too are ended on a timeout
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return {"error": "timed out after %d s" % timeout, "seconds": time.perf_counter() - began}
    except BaseException:  # stopped (Ctrl-C, a TERM from the caller's time limit): the turn's processes too
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    result = parse_child(out)
    if result is None:
        tail = (err or out).strip().splitlines()[-5:]
        result = {"error": "exit %d, no result: %s" % (proc.returncode, " | ".join(tail))}
    elif not result["theano_queue"].startswith(os.path.join(tree, "")):
        result = {"error": "imported theano_queue from %s, not from the tree %s" % (result["theano_queue"], tree)}
    result["seconds"] = time.perf_counter() - began
    return result


def turns(r):
    """The trees' order in round r: old first in even rounds, new first in odd ones."""
    return ("old", "new") if r % 2 == 0 else ("new", "old")


def collect(results):
    """{(scenario, measure): {"old": [...], "new": [...]}} over the rounds' results; the skips and errors
    as {scenario or "turn": [text]}.  ``results`` is [{"old": child result, "new": child result}]."""
    values, notes = {}, {}
    for turn in results:
        this_round = {}
        for side, result in turn.items():
            if "error" in result:
                notes.setdefault("turn", []).append("%s: %s" % (side, result["error"]))
                continue
            for name, scenario in result["scenarios"].items():
                for key in ("skipped", "error"):
                    if key in scenario:
                        notes.setdefault(name, []).append("%s %s: %s" % (side, key, scenario[key]))
                for measure, seconds in scenario.get("measures", {}).items():
                    values.setdefault((name, measure), {"old": [], "new": [], "pairs": []})[side].append(seconds)
                    this_round.setdefault((name, measure), {})[side] = seconds
        for key, sides in this_round.items():  # the round's two turns, side by side
            if len(sides) == 2:
                values[key]["pairs"].append((sides["old"], sides["new"]))
    return values, notes


def rows(values, tolerance):
    """The compared measures, in scenario order: only those both trees measured."""
    out = []
    for (name, measure), sides in values.items():
        if not sides["old"] or not sides["new"]:
            continue
        row = {
            "scenario": name,
            "measure": measure,
            "unit": UNITS.get(name, "us"),
            "control": (name, measure) in CONTROLS,
        }
        row.update(compare(sides["old"], sides["new"], tolerance, sides["pairs"]))
        row["old"]["values"], row["new"]["values"] = sides["old"], sides["new"]
        out.append(row)
    return sorted(out, key=lambda r: SCENARIOS.index(r["scenario"]) if r["scenario"] in SCENARIOS else 99)


def us(seconds):
    """Microseconds, four significant digits (whole ones from 1000 on)."""
    return "%.0f" % (1e6 * seconds) if seconds >= 1e-3 else "%.4g" % (1e6 * seconds)


def spread_text(side):
    """ "median [min-max]" in microseconds."""
    return "%s [%s-%s]" % (us(side["median"]), us(side["min"]), us(side["max"]))


def table(compared):
    """The printed table: microseconds, medians [min-max], the ratios and the verdict."""
    line = "%-8s %-40s %-10s %24s %24s %7s %7s %7s  %s"
    head = ("scenario", "measure", "unit", "old median [min-max]", "new median [min-max]", "new/old", "of mins")
    lines = [line % (head + ("paired", ""))]
    for r in compared:
        lines.append(
            line
            % (
                r["scenario"],
                r["measure"] + (" (control)" if r["control"] else ""),
                r["unit"],
                spread_text(r["old"]),
                spread_text(r["new"]),
                "%.3f" % r["ratio"],
                "%.3f" % r["ratio of mins"],
                "-" if r["paired"] is None else "%.3f" % r["paired"],
                r["verdict"],
            )
        )
    return "\n".join(lines)


def turn_seconds(results):
    """{scenario: median seconds it took in a turn}, and {"turn": median seconds of a whole turn}: what a
    quicker call leaves out."""
    import statistics

    took = {}
    for turn in results:
        for result in turn.values():
            parts = [("turn", result)] + list(result.get("scenarios", {}).items())
            for name, part in parts:
                if "seconds" in part:
                    took.setdefault(name, []).append(part["seconds"])
    return {name: statistics.median(values) for name, values in took.items()}


def verdicts(compared, tolerance):
    """The closing lines: the worst queue path, the controls' range (the noise floor), what moved."""
    paths = [r for r in compared if not r["control"]]
    controls = [r["ratio"] for r in compared if r["control"]]
    lines = []
    if paths:
        worst = max(paths, key=lambda r: r["ratio"])
        lines.append(
            "worst queue path: %s %s at %.3f x old (of mins %.3f, paired %s); none slower than %.2f x: %s"
            % (
                worst["scenario"],
                worst["measure"],
                worst["ratio"],
                worst["ratio of mins"],
                "-" if worst.get("paired") is None else "%.3f" % worst["paired"],
                1 + tolerance,
                "yes" if all(r["verdict"] != "slower" for r in paths) else "NO",
            )
        )
    if any(min(r["old"]["rounds"], r["new"]["rounds"]) < 3 for r in paths if "old" in r):
        lines.append("fewer than 3 rounds a side: no verdicts (the medians are one disturbed turn away)")
    if controls:
        lines.append("controls (no queue code; the noise floor): new/old %.3f to %.3f" % (min(controls), max(controls)))
        if max(abs(c - 1) for c in controls) > tolerance:
            lines.append(
                "NOISE: a control moved by more than %.2f x between identical code: this run cannot resolve %.2f x; "
                "rerun on a quieter machine or with more rounds" % (1 + tolerance, 1 + tolerance)
            )
    for r in compared:
        if r["verdict"]:
            lines.append(
                "%s: %s %s, %.3f x (of mins %.3f)"
                % (r["verdict"], r["scenario"], r["measure"], r["ratio"], r["ratio of mins"])
            )
    return lines


class Stopped(Exception):
    """SIGTERM came: the run reports what it has."""


def stopped(signum, frame):
    raise Stopped()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="the checkout before (its engine built in place)")
    parser.add_argument("--new", required=True, help="the checkout after")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each one turn per tree")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, of: " + ", ".join(SCENARIOS))
    parser.add_argument(
        "--quick", action="store_true", help="fewer steps per measure: the whole run in ~3 min on a GPU"
    )
    parser.add_argument("--build", action="store_true", help="build both trees' engines in place first")
    parser.add_argument("--json", help="write the rounds and the comparison here")
    parser.add_argument("--python", default=sys.executable, help="the Python of the turns (default: this one)")
    parser.add_argument("--tolerance", type=float, default=0.02, help="the verdicts' margin: 0.02 is 1.02 x")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one turn may take")
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds for all rounds: no round starts that would end past it (quick: 170; 0: no limit)",
    )
    args = parser.parse_args(argv)
    asked = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(asked) - set(SCENARIOS))
    if unknown:
        parser.error("unknown scenarios %s; known: %s" % (", ".join(unknown), ", ".join(SCENARIOS)))
    trees = {"old": os.path.abspath(args.old), "new": os.path.abspath(args.new)}
    if args.build:
        for tree in trees.values():
            build(tree, args.python)
    trees = {side: check_tree(tree) for side, tree in trees.items()}
    budget = args.budget if args.budget is not None else (170 if args.quick else 0)
    config = {"scenarios": asked, "quick": args.quick}
    print(
        "A/B old=%s new=%s, %d rounds (%s), scenarios %s"
        % (trees["old"], trees["new"], args.rounds, "quick" if args.quick else "full", ",".join(asked)),
        flush=True,
    )
    overlay = overlay_dir()
    results, began, longest = [], time.perf_counter(), 0.0
    was = signal.signal(signal.SIGTERM, stopped)  # a caller's time limit: the rounds so far are still reported
    try:
        for r in range(args.rounds):
            if budget and results and time.perf_counter() - began + longest > budget:
                print("budget of %.0f s reached: %d of %d rounds run" % (budget, len(results), args.rounds), flush=True)
                break
            started = time.perf_counter()
            turn = {side: run_turn(args.python, trees[side], overlay, config, args.timeout) for side in turns(r)}
            longest = max(longest, time.perf_counter() - started)
            results.append(turn)
            print(
                "round %d/%d: %s"
                % (
                    r + 1,
                    args.rounds,
                    ", ".join(
                        "%s %.1f s%s" % (s, t["seconds"], " (%s)" % t["error"] if "error" in t else "")
                        for s, t in turn.items()
                    ),
                ),
                flush=True,
            )
    except Stopped:
        print("stopped by SIGTERM: %d of %d rounds run" % (len(results), args.rounds), flush=True)
    finally:
        signal.signal(signal.SIGTERM, was)
        shutil.rmtree(overlay, ignore_errors=True)
    values, notes = collect(results)
    compared = rows(values, args.tolerance)
    device = sorted({t.get("device", "?") for turn in results for t in turn.values() if "error" not in t})
    print("device: %s" % ", ".join(device))
    print(table(compared))
    for line in verdicts(compared, args.tolerance):
        print(line)
    took = turn_seconds(results)
    print("seconds per turn (medians): " + ", ".join("%s %.1f" % kv for kv in took.items()))
    for name, texts in notes.items():
        for text in sorted(set(texts)):
            print("note: %s: %s" % (name, text))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": " ".join(
                        [sys.executable, "bench/ab.py"] + list(argv if argv is not None else sys.argv[1:])
                    ),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "trees": trees,
                    "device": device,
                    "config": config,
                    "compared": compared,
                    "turn seconds": took,
                    "notes": notes,
                    "rounds": results,
                },
                f,
                indent=1,
            )
        print("wrote", args.json)
    return 0 if compared else 1


# ---- a child: one tree's turn ---------------------------------------------------------------------------


def child(config):
    """Every asked scenario once, in this process (its theano_queue the tree's): the result dict."""
    import theano

    import theano_queue as tq
    from bench import ab_scenarios

    on_gpu = tq.Queue([("x", "float32", (1,))]).on_gpu
    result = {"theano_queue": os.path.dirname(tq.__file__), "device": theano.config.device, "scenarios": {}}
    for name in config["scenarios"]:
        began = time.perf_counter()
        try:
            entry = ab_scenarios.run(name, on_gpu, config["quick"])
        except Exception as exc:  # one broken scenario must not hide the others' figures
            entry = {"error": "%s: %s" % (type(exc).__name__, exc)}
        entry["seconds"] = time.perf_counter() - began
        result["scenarios"][name] = entry
    return result


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(MARK + json.dumps(child(json.loads(sys.argv[2]))), flush=True)
    else:
        sys.exit(main())
