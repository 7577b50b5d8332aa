"""The venv that README.rst's commands make runs a newcomer's own script, with or without THEANO_FLAGS."""
import os
import subprocess
import sys
import textwrap

# README.rst's "Use" section, cut down to what runs on its own.
NEWCOMER_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import theano, theano.tensor as T
    import theano_queue as tq

    q = tq.Queue([("x", "float32", (128, 64)), ("y", "int32", (128,))], capacity=3)
    x, y = q.dequeue()
    f = theano.function([], T.sum(x) + T.sum(y))
    with tq.Feeder(q, ((np.ones((128, 64), "float32"), np.ones(128, "int32")) for _ in range(3))):
        total = 0
        while True:
            try:
                total += f()
            except tq.QueueClosed:
                break
    print("total", int(total), "blas", repr(theano.config.blas.ldflags), "floatX", theano.config.floatX)
    """
)


def run_as_a_newcomer(tmp_path, **env_changes):
    """The script, run by this venv's Python from a fresh directory with the given environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("THEANO_FLAGS", "THEANORC")}
    env.update(env_changes)
    env["HOME"] = str(tmp_path)  # no ~/.theanorc of the machine's user
    script = tmp_path / "mine.py"
    script.write_text(NEWCOMER_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def test_a_script_runs_with_no_theano_flags(tmp_path):
    out = run_as_a_newcomer(tmp_path)
    assert out[:2] == ["total", str(3 * (128 * 64 + 128))]
    assert out[3] == "'-lopenblas'"


def test_user_flags_are_merged_with_the_venvs_defaults(tmp_path):
    out = run_as_a_newcomer(tmp_path, THEANO_FLAGS="floatX=float64")
    assert out[3:] == ["'-lopenblas'", "floatX", "float64"]


def test_user_config_files_and_flags_override_the_venvs_defaults(tmp_path):
    (tmp_path / ".theanorc").write_text("[global]\nfloatX = float32\n[blas]\nldflags = -lblas\n")
    out = run_as_a_newcomer(tmp_path)
    assert out[3:] == ["'-lblas'", "floatX", "float32"]
    out = run_as_a_newcomer(tmp_path, THEANO_FLAGS="blas.ldflags=-lopenblas")
    assert out[3] == "'-lopenblas'"

