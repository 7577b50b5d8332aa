"""The Makefile's targets as README.rst gives them, run by make in a scratch copy of the checkout.

The copy holds the checkout's tracked files as they are now (what a fresh
clone of this tree would hold) plus the built engine; make runs with the
venv these tests run in, told (``-o``) that the venv and the engine are up to
date, so that nothing is installed or built.
"""

import glob
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = sys.prefix
# The figures of record, which only a run on a GPU may replace.
FIGURES = ("doc/bench/results.json", "doc/benchmarks.rst")

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git"
)


def scratch_checkout(path):
    """Copies the tracked files of this checkout, as they are now, and the built engine into ``path``."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(os.path.join(path, os.path.dirname(name)), exist_ok=True)
            shutil.copyfile(os.path.join(ROOT, name), os.path.join(path, name))
    for engine in glob.glob(os.path.join(ROOT, "theano_queue", "_engine*.so")):
        shutil.copyfile(engine, os.path.join(path, "theano_queue", os.path.basename(engine)))
    return path


def make(checkout, *args, env=None, timeout=300):
    """``make ARGS`` in ``checkout``, nothing installed or built; its whole process group ends on a timeout."""
    environment = dict(os.environ, **(env or {}))
    command = [
        "make",
        "--no-print-directory",
        "VENV=" + VENV,
        "-o",
        os.path.join(VENV, ".installed"),
        "-o",
        "build/engine.stamp",
        *args,
    ]
    process = subprocess.Popen(
        command,
        cwd=str(checkout),
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("make %s still ran after %d s" % (" ".join(args), timeout))
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_make_bench_without_a_gpu_refuses_and_leaves_the_figures_alone(tmp_path):
    checkout = scratch_checkout(tmp_path / "checkout")
    before = {name: digest(checkout / name) for name in FIGURES}
    # Theano on the CPU, whatever this machine's flags say.
    flags = ",".join(filter(None, [os.environ.get("THEANO_FLAGS", ""), "device=cpu"]))
    # The bound is far above the refusal (an import of Theano) and far below a benchmark run (minutes).
    done = make(checkout, "bench", env={"THEANO_FLAGS": flags}, timeout=240)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "Theano is not on a GPU here" in done.stderr
    # The command that does work, through make too.
    assert "make bench BENCH_ARGS='--out " in done.stderr
    assert "[1]" not in done.stdout, "a benchmark ran: " + done.stdout[-2000:]
    assert {name: digest(checkout / name) for name in FIGURES} == before


FAKE_PYTHON = """#!/bin/sh
# Stands in for the venv's python: logs what it was asked to run, fails the step named in $FAIL_STEP.
echo "$*" >> "$FAKE_LOG"
case "$*" in
  *"$FAIL_STEP"*) exit 1 ;;
esac
exit 0
"""


# make test's steps, in order, as the stand-in python logs them (the module after -m, or the script): lint, the
# Theano suite, the doctests, the HTML docs, the PyTensor suite twice, the release's wheel and its check, the skips.
TEST_STEPS = ["ruff", "ruff", "mypy", "pytest", "sphinx", "sphinx", "pytest", "pytest", "build"]
TEST_STEPS += ["scripts/check_wheel.py", "tests/support/skip_report.py"]


def step_name(logged):
    words = logged.split()
    return words[1] if words[0] == "-m" else words[0]


@pytest.mark.parametrize(
    "failing, status",
    [
        ("ruff check", 2),
        ("pytest -q", 2),
        ("-b doctest", 2),
        ("-b html", 2),
        ("pytensor", 2),
        ("-m build", 2),
        ("check_wheel", 2),
        ("nothing", 0),
    ],
)
def test_make_test_runs_every_step_whatever_the_others_say(tmp_path, failing, status):
    """Lint, the Theano suite, both doc builds, the PyTensor suite (twice) and the wheel each run; make fails when
    any did, and ends by listing the skips."""
    checkout = scratch_checkout(tmp_path / "checkout")
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "log"
    # PT_PACKAGE= PM_PACKAGE= : the PyTensor and PyMC venvs count as made; CLANG_FORMAT=true: the C style check passes.
    stand_ins = ["PY=%s" % fake, "PT_PY=%s" % fake, "PM_PY=%s" % fake, "PT_PACKAGE=", "PM_PACKAGE="]
    stand_ins += ["CLANG_FORMAT=true", "PYTEST_ARGS=-q"]
    done = make(checkout, "test", *stand_ins, env={"FAKE_LOG": str(log), "FAIL_STEP": failing}, timeout=60)
    steps = log.read_text().splitlines()
    if failing == "ruff check":  # lint stops at its first failure, the rest still runs
        assert [step_name(step) for step in steps] == ["ruff"] + TEST_STEPS[3:], steps
    elif failing == "-m build":  # the check needs the wheel; the skips are still listed
        assert [step_name(step) for step in steps] == TEST_STEPS[:-2] + TEST_STEPS[-1:], steps
    else:
        assert [step_name(step) for step in steps] == TEST_STEPS, steps
        assert "-b doctest" in steps[4] and "-b html" in steps[5]
        assert "tests/pytensor" in steps[6] and "tests/pytensor" in steps[7]  # PyTensor 3.0, then PyMC's 2.38
        assert steps[8] == "-m build --outdir build/dist ." and steps[9] == "scripts/check_wheel.py build/dist"
        assert steps[-1] == "tests/support/skip_report.py build/skips.jsonl"
    assert done.returncode == status, (done.stdout, done.stderr)
