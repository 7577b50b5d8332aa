"""examples/pytensor_logreg.py runs and both of its loops learn the same model."""

import os
import re
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples", "pytensor_logreg.py")


def run_example(*args):
    small = ["--samples", "3000", "--features", "8", "--batch", "100", "--epochs", "1"]
    out = subprocess.run(
        [sys.executable, "-W", "ignore", EXAMPLE, *small, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_queue_and_set_value_loops_agree_batch_for_batch():
    out = run_example("--no-shuffle", "--linker", "c")
    curve = re.findall(r"^\s+\d+\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert len(curve) >= 5 and all(queue == set_value for queue, set_value in curve)
    accuracy = re.findall(r"^(queue|set_value)\s+30\s+.*\s([\d.]+)$", out, re.M)
    assert [name for name, _ in accuracy] == ["queue", "set_value"]
    assert all(float(a) > 0.7 for _, a in accuracy)  # the labels follow a logistic model: it is learnt
