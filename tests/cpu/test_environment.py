"""The venv that README.rst's commands make runs a newcomer's own script, with or without THEANO_FLAGS."""

import os
import subprocess
import sys
import textwrap

import numpy as np
from timing import scaled

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


# An RNN step with theano.scan, as the LSTM tutorial writes one.
SCAN_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import theano, theano.tensor as T

    x = T.matrix("x")
    h, _ = theano.scan(lambda row, prev: T.tanh(row + prev), sequences=x, outputs_info=T.zeros_like(x[0]))
    f = theano.function([x], h[-1].sum())
    print("scan", round(float(f(np.ones((5, 3), theano.config.floatX))), 3))
    """
)


def run_as_a_newcomer(tmp_path, script_text=NEWCOMER_SCRIPT, **env_changes):
    """The script, run by this venv's Python from a fresh directory with the given environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("THEANO_FLAGS", "THEANORC")}
    env.update(env_changes)
    env["HOME"] = str(tmp_path)  # no ~/.theanorc of the machine's user
    script = tmp_path / "mine.py"
    script.write_text(script_text)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(300)
    )
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


def test_a_script_with_scan_runs(tmp_path):
    # Theano 1.0.5 compiles scan's inner loop from Cython output that Python
    # 3.11 cannot build; the venv makes scan take Theano's own Python loop.
    out = run_as_a_newcomer(tmp_path, SCAN_SCRIPT)
    h = 0.0
    for _ in range(5):
        h = np.tanh(1.0 + h)
    assert out == ["scan", str(round(3 * h, 3))]
