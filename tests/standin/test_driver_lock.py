"""bench/driver_lock.py, issue 43.1 and 43.2's probe of the driver's lock: its summary of the program's lines,
and the program against the stand-in driver (tests/c/fake_libcuda.c), which runs every mode (a stand-in without
graphs every mode but theirs) and must be given back everything the program took."""

import json
import math
import os
import subprocess
import sys

import pytest
from fake_cuda import NOTHING_HELD, ROOT, compile_stand_in, fake_cuda, held  # noqa: F401  (fake_cuda is a fixture)

from bench.driver_lock import DEFAULT_MODES, parse, summarise

OUTPUT = """\
none 0 200.000 150.000 nan 1
upload 0 260.000 200.000 30.000 1
graph-upload 0 n/a the driver lacks the graph functions
none 1 100.000 100.000 nan 1
upload 1 150.000 120.000 20.000 0
"""


def test_modes_are_paired_with_none_round_by_round():
    """Round 0: upload 1.3x none; round 1, on a machine twice as fast: 1.5x.  The paired median is 1.4, not the
    ratio of the medians; a producer that fell behind in one round did not keep up."""
    summary = summarise(parse(OUTPUT))
    upload = summary["upload"]
    assert upload["x_none"] == pytest.approx(1.4)
    assert upload["launch_x_none"] == pytest.approx((200 / 150 + 120 / 100) / 2)
    assert upload["period_us"] == pytest.approx(205) and upload["spread"] == pytest.approx(260 / 150)
    assert upload["call_us"] == pytest.approx(25) and upload["calls"] == (0, 3)
    assert upload["kept_up"] is False
    assert summary["none"]["x_none"] == 1.0 and summary["none"]["kept_up"] is None
    assert math.isnan(summary["none"]["call_us"])
    assert summary["graph-upload"] == {"unavailable": "the driver lacks the graph functions"}


def probe(fake, tmp_path, *args, batch=65536):
    """Runs the probe briefly against the stand-in `fake`, its streams on threads of their own as the GPU's are
    (mode persistent's kernel never ends by itself); its JSON summary and its output."""
    out = tmp_path / "lock.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.driver_lock", "--steps", "4", "--rounds", "2", "--launches", "3"]
        + ["--batch", str(batch), "--json", str(out), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, FAKE_CUDA_ASYNC="1", **fake),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert held(fake) == NOTHING_HELD  # graphs, streams, memory: all given back
    return json.loads(out.read_text())["modes"], done.stdout


def test_every_mode_runs_on_the_stand_in_and_gives_everything_back(fake_cuda, tmp_path):  # noqa: F811
    modes, _ = probe(fake_cuda, tmp_path)
    assert set(modes) == set(DEFAULT_MODES)
    for name in DEFAULT_MODES:
        assert modes[name]["period_us"] > 0 and modes[name]["launch_us"] > 0, name
    for name in set(DEFAULT_MODES) - {"none", "host", "gather", "graph-gather", "gather@late"}:
        assert modes[name]["call_us"] > 0, name  # the producer's calls (deferred: the step's own) were timed
    assert modes["upload@late"]["calls"] == [0, 3] and modes["deferred"]["calls"] == [3, 0]
    assert modes["graph-upload"]["calls"] == [0, 1] and modes["graph-upload+sync"]["calls"] == [0, 2]
    assert modes["persistent"]["calls"] == [0, 0] and modes["persistent"]["kept_up"] is True


def test_persistent_feeds_each_step_with_no_driver_call_from_its_producer(fake_cuda, tmp_path):  # noqa: F811
    """Issue 43.2's other option: after one launch, the producer only writes row numbers into mapped memory.
    The step waits for its batch and frees the slot with the stream's memory operations, one each a step, and
    the probe checked the last batch's gathered rows (it exits 1 on a wrong row)."""
    log = tmp_path / "calls.log"
    modes, _ = probe(
        dict(fake_cuda, FAKE_CUDA_LOG=str(log), FAKE_CUDA_LOG_THREADS="1"), tmp_path, "--modes", "persistent"
    )
    assert modes["persistent"]["period_us"] > 0 and modes["persistent"]["kept_up"] is True
    lines = log.read_text().splitlines()
    assert not [line for line in lines if line.endswith(" other")]  # the producer thread called nothing
    steps = 2 * 4 * 2  # warm-up and timed steps, two rounds
    assert sum(line.startswith("waitvalue ") for line in lines) == steps
    assert sum(line.startswith("writevalue ") for line in lines) == steps
    assert sum(line.startswith("kernel ") for line in lines) == steps * 3 + 2  # the steps' launches, one per round


@pytest.mark.parametrize(
    "flags, batch, why",
    [
        (("-DFAKE_CUDA_NO_MEMOPS",), 65536, "the driver lacks stream memory operations"),
        ((), 4100, "the batch is not 256 rows of 16-byte units"),
    ],
)
def test_persistent_says_why_it_cannot_run(tmp_path, flags, batch, why):
    fake = dict(
        THEANO_QUEUE_LIBCUDA=compile_stand_in(str(tmp_path / "libcuda.so.1"), *flags),
        FAKE_CUDA_REPORT=str(tmp_path / "report"),
    )
    modes, _ = probe(fake, tmp_path, "--modes", "none,persistent,upload", batch=batch)
    assert modes["persistent"] == {"unavailable": why}
    assert modes["upload"]["call_us"] > 0


def test_a_driver_without_graphs_says_so_and_runs_the_rest(tmp_path):
    fake = dict(
        THEANO_QUEUE_LIBCUDA=compile_stand_in(str(tmp_path / "libcuda.so.1"), "-DFAKE_CUDA_NO_GRAPHS"),
        FAKE_CUDA_REPORT=str(tmp_path / "report"),
    )
    modes, printed = probe(fake, tmp_path, "--modes", "none,upload,graph-upload,graph-gather@late")
    for graph in ("graph-upload", "graph-gather@late"):
        assert "graph functions" in modes[graph]["unavailable"]
    assert modes["upload"]["call_us"] > 0
    assert "graph-upload           n/a: the driver lacks the graph functions" in printed


@pytest.mark.parametrize("mode", ["graph", "none@late", "upload@early"])
def test_an_unknown_mode_is_named(mode):
    done = subprocess.run(
        [sys.executable, "-m", "bench.driver_lock", "--modes", "none," + mode], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2 and "no mode %s; the modes are none, host" % mode in done.stderr
