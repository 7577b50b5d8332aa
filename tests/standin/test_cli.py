"""The theano-queue command, run in subprocesses: exit codes and output of each
command, on this machine (no GPU in CI) and against a stand-in CUDA driver
(tests/c/fake_libcuda.c) that also checks that every context, allocation and
stream the probe takes is given back."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
from fake_cuda import NOTHING_HELD, ROOT, build_stand_in, held


def run(*args, env=None, cwd=ROOT, timeout=300):
    environment = dict(os.environ)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "theano_queue", *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        timeout=timeout,
    )


NO_DRIVER = {"THEANO_QUEUE_LIBCUDA": "/nonexistent/libcuda.so.1"}


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """The stand-in CUDA driver's environment (tests/support/fake_cuda.py)."""
    return build_stand_in(tmp_path_factory)


# Theano on the CPU, whatever this machine's flags say (on a GPU machine they name a GPU).
ON_THE_CPU = {"THEANO_FLAGS": ",".join(filter(None, [os.environ.get("THEANO_FLAGS", ""), "device=cpu"]))}


@pytest.mark.parametrize("command", ["info", "probe", "demo", "bench"])
def test_every_command_has_help(command):
    done = run(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: theano-queue %s" % command)


def undescribed_options(help_text):
    """The options argparse's help lists with no description (on their line or the next one, indented)."""
    lines = help_text.split("options:", 1)[1].splitlines()
    missing = []
    for i, line in enumerate(lines):
        if not line.startswith("  -"):
            continue
        described = "  " in line.strip() or (i + 1 < len(lines) and lines[i + 1].startswith(" " * 8))
        if not described:
            missing.append(line.strip())
    return missing


@pytest.mark.parametrize("command", ["info", "probe", "demo"])
def test_every_option_of_a_command_says_what_it_does(command):
    done = run(command, "--help")
    assert done.returncode == 0, done.stderr
    assert "--" in done.stdout.split("options:", 1)[1]
    assert undescribed_options(done.stdout) == []


def test_usage_version_and_unknown_command():
    done = run()
    assert done.returncode == 2 and "commands:" in done.stdout
    for name in ("info", "probe", "demo", "bench"):
        assert "\n  %s " % name in done.stdout
    assert run("--help").returncode == 0
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("theano_queue ")
    wrong = run("frobnicate")
    assert wrong.returncode == 2 and "unknown command 'frobnicate'" in wrong.stderr


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "theano-queue")
    if not os.path.exists(script):
        pytest.skip("the package is not installed with its entry points here (pip install -e .)")
    done = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("theano_queue ")


def test_info_without_a_cuda_driver():
    done = run("info", env=NO_DRIVER)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "python " in out and "numpy 1.23" in out and "theano 1.0.5" in out and "tqdm " in out
    assert "THEANO_FLAGS=" in out and "Theano in effect: device=" in out
    assert "CUDA driver: none; GPUs: none (no CUDA driver: /nonexistent/libcuda.so.1 could not be loaded" in out


def test_info_keeps_the_venvs_blas_flag():
    if "theanorc" not in os.environ.get("THEANORC", ""):
        pytest.skip("needs the project's venv, whose theanorc sets blas.ldflags (scripts/install-deps.sh)")
    done = run("info", env=dict(NO_DRIVER, THEANO_FLAGS="floatX=float32"))
    assert done.returncode == 0, done.stderr
    assert "blas.ldflags=-lopenblas" in done.stdout and "set to empty" not in done.stdout


def test_a_blas_flag_is_set_only_where_no_theano_setting_names_one(tmp_path, monkeypatch):
    from theano_queue.tools import cli

    bare, configured = tmp_path / "bare.rc", tmp_path / "configured.rc"
    bare.write_text("[global]\nfloatX = float32\n")
    configured.write_text("[blas]\nldflags = -lblas\n")
    monkeypatch.setenv("THEANO_FLAGS", "floatX=float32")
    monkeypatch.setenv("THEANORC", str(bare))
    assert "set to empty" in cli.theano_environment()
    assert os.environ["THEANO_FLAGS"] == "floatX=float32,blas.ldflags="
    monkeypatch.setenv("THEANO_FLAGS", "floatX=float32")
    monkeypatch.setenv("THEANORC", os.pathsep.join([str(bare), str(configured)]))
    assert cli.theano_environment() is None and os.environ["THEANO_FLAGS"] == "floatX=float32"


def test_info_with_a_gpu(stand_in):
    done = run("info", env=stand_in)
    assert done.returncode == 0, done.stderr
    assert "CUDA driver: supports CUDA 13.0; 1 GPU(s)" in done.stdout
    assert (
        "GPU 0: Fake GPU 0, PCI 0000:10:00.0, compute 9.0, 3 copy engine(s), 15.0 GiB free of 16.0 GiB" in done.stdout
    )
    assert "  pinned memory: ok" in done.stdout and "  copy engine: ok" in done.stdout
    assert held(stand_in) == NOTHING_HELD


def test_info_with_a_driver_but_no_gpu(stand_in):
    done = run("info", env=dict(stand_in, FAKE_CUDA_DEVICES="0"))
    assert done.returncode == 0
    assert "GPUs: none (no GPU: the CUDA driver is installed but finds no device" in done.stdout


def test_probe_without_a_cuda_driver_measures_the_host_then_fails():
    done = run("probe", "--sizes", "4", "--repeats", "2", env=NO_DRIVER)
    assert done.returncode == 1
    assert done.stdout.startswith("host copy, 4 MiB: ")
    assert "GB/s through the engine's copy pool" in done.stdout and "numpy.copyto" in done.stdout
    assert "(needs a GPU)" in done.stdout and "host-memory queue (target='cpu')" in done.stdout
    assert done.stderr.strip() == (
        "theano-queue probe: no CUDA driver: /nonexistent/libcuda.so.1 could not be loaded "
        "(/nonexistent/libcuda.so.1: cannot open shared object file: No such file or directory); this needs an "
        "NVIDIA GPU and its driver; host-to-device bandwidth cannot be measured here"
    )


def test_probe_with_a_driver_but_no_gpu(stand_in):
    done = run("probe", "--sizes", "2", "--repeats", "2", env=dict(stand_in, FAKE_CUDA_DEVICES="0"))
    assert done.returncode == 1
    assert "theano-queue probe: no GPU: the CUDA driver is installed but finds no device" in done.stderr


def test_probe_with_a_gpu(stand_in):
    done = run("probe", "--sizes", "2,4", "--repeats", "2", env=stand_in)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("host->device,    2 MiB: pinned ") and "pageable" in lines[1]
    assert lines[2].startswith("host->device,    4 MiB: pinned ")
    assert lines[3] == "limits at 4 MiB, by source kind:"
    assert "(needs a GPU)" not in done.stdout
    assert held(stand_in) == NOTHING_HELD


@pytest.mark.parametrize("failing", ["cuStreamCreate", "cuMemAlloc_v2", "cuMemcpyHtoDAsync_v2", "cuCtxPushCurrent_v2"])
def test_probe_gives_everything_back_when_a_call_fails(stand_in, failing):
    done = run("probe", "--sizes", "2", "--repeats", "2", "--json", env=dict(stand_in, FAKE_CUDA_FAIL=failing))
    assert done.returncode == 1
    call = failing[:-3] if failing.endswith("_v2") else failing  # messages name the call, not its versioned symbol
    assert "theano-queue probe: %s: CUDA_ERROR_OUT_OF_MEMORY (fake failure)" % call in done.stderr
    assert '"error": "cu' in done.stdout
    assert held(stand_in) == NOTHING_HELD


def test_demo_trains_and_shows_its_monitor():
    pytest.importorskip("sklearn", reason="the demo's digits come from scikit-learn")
    # As `make demo` runs it on a fresh machine: no Theano flags (floatX float64).
    done = run("demo", "--epochs", "2", "--progress", env={"THEANO_FLAGS": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "epoch  2" in done.stdout and "final test accuracy" in done.stdout
    # One verdict an epoch; an epoch of a few ms (the usual here) is too short to judge.
    verdicts = ("digits: compute-bound", "digits: input-bound", "digits: balanced", "digits: too short to judge")
    assert sum(done.stderr.count(v) for v in verdicts) == 2, done.stderr[-3000:]


def test_bench_refuses_to_overwrite_the_figures_without_a_gpu():
    done = run("bench", env=ON_THE_CPU)
    assert done.returncode == 1
    assert "theano-queue bench: Theano is not on a GPU here" in done.stderr
    assert "--out" in done.stderr


def test_bench_runs_the_cpu_scenario_into_another_file(tmp_path):
    out = tmp_path / "results.json"
    done = run("bench", "--quick", "--only", "9", "--out", str(out), env=ON_THE_CPU)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[9] CPU target" in done.stdout and out.exists()
    assert "results go to --out only" in done.stderr


def test_bench_outside_a_checkout(tmp_path):
    """An installed package (no bench/ beside it) says where the benchmarks are."""
    shutil.copytree(
        os.path.join(ROOT, "theano_queue"), str(tmp_path / "theano_queue"), ignore=shutil.ignore_patterns("__pycache__")
    )
    # The copy comes first; what else is on the path (a borrowed numpy, say) stays.
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    done = run("bench", "--quick", env=env, cwd=str(tmp_path))
    assert done.returncode == 1
    assert "theano-queue bench: the benchmarks are not installed with the package" in done.stderr
    helped = run("bench", "--help", env=env, cwd=str(tmp_path))
    assert helped.returncode == 0 and "Not available here" in helped.stdout


BAD_ARGUMENTS = [
    ("demo", "--batch-size", "0"),
    # More rows than the training digits: the check needs the digits, which come with scikit-learn.
    pytest.param(
        "demo",
        "--batch-size",
        "100000",
        marks=pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="needs scikit-learn (the digits)"),
    ),
    ("demo", "--capacity", "0"),
    ("demo", "--capacity", "5000"),
    ("demo", "--epochs", "-1"),
    ("demo", "--epochs", "0"),
    ("demo", "--hidden", "0"),
    ("demo", "--learning-rate", "0"),
    ("demo", "--learning-rate", "nan"),
    ("demo", "--seed", "-1"),
    ("demo", "--epochs", "two"),
    ("probe", "--device", "-1"),
    ("probe", "--repeats", "0"),
    ("probe", "--repeats", "-3"),
    ("probe", "--threads", "0"),
    ("probe", "--threads", "1000"),
    ("probe", "--sizes", "0"),
]


@pytest.mark.parametrize("command, argument, value", BAD_ARGUMENTS)
def test_a_bad_argument_is_a_usage_error_naming_it(command, argument, value, capsys, monkeypatch):
    from theano_queue.tools import cli

    monkeypatch.setenv("THEANO_FLAGS", ON_THE_CPU["THEANO_FLAGS"])  # the command may add to it
    with pytest.raises(SystemExit) as exited:
        cli.main([command, argument, value])
    assert exited.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("theano-queue %s: error: argument %s: expected " % (command, argument)), last
    assert repr(value) in last or value in last


def test_a_usage_error_is_one_line_and_exit_2_not_a_traceback():
    done = run("demo", "--batch-size", "0", env=ON_THE_CPU)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "theano-queue demo: error: argument --batch-size: expected an int >= 1, got '0'"
    )
