"""examples/pymc_advi.py runs where PyMC is installed: both fits learn alike; the resumed fit's epochs are exact."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("pymc")

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples", "pymc_advi.py")


@pytest.mark.timeout(600)
def test_minibatch_and_queue_fits_agree_and_the_resumed_fit_takes_every_batch_once():
    small = ["--samples", "20000", "--features", "5", "--batch", "200", "--iterations", "1500", "--linker", "c"]
    out = subprocess.run(
        [sys.executable, "-W", "ignore", EXAMPLE, *small],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    fits = dict(re.findall(r"^round 0 c\s+(\S+)\s+[\d.]+ ms/1000 it\s+RMSE to MLE ([\d.]+)", out.stdout, re.M))
    assert sorted(fits) == ["pm.Minibatch", "queue"], out.stdout
    # The same model and optimizer on equally shuffled batches: equally far along.
    assert abs(float(fits["queue"]) - float(fits["pm.Minibatch"])) < 0.05, out.stdout
    assert re.search(r"^c\s+queue\s+[\d.]+\s+[\d.]+ - [\d.]+\s+[\d.]+$", out.stdout, re.M), out.stdout
    first, second, total = map(
        int, re.search(r"first fit took (\d+) .*\n.*took (\d+) batches: (\d+) in all", out.stdout).groups()
    )
    assert (first, second, total) == (150, 50, 200)  # 2 epochs of 100 batches: stopped at 150, resumed for the rest
    coverage = float(re.search(r"draws saw ([\d.]+)% of the rows", out.stdout).group(1))
    assert 55 < coverage < 70  # with replacement: about 1 - 1/e
