"""The docs' worker examples (issue 27, items 4 and 5): the model under the guard, a first batch in seconds, and
two Feeders for one epoch without the race."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from timing import scaled

import theano_queue as tq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_tutorial_shows_the_whole_worker_script_with_the_model_under_the_guard():
    with open(os.path.join(ROOT, "doc", "tutorial.rst")) as f:
        tutorial = f.read()
    assert ".. literalinclude:: ../examples/train_workers.py" in tutorial
    with open(os.path.join(ROOT, "examples", "train_workers.py")) as f:
        script = f.read()
    top_level = [line for line in script.splitlines() if re.match(r"[a-zA-Z_]", line)]
    assert not any("theano.function" in line or "tq.Queue" in line or "main()" == line for line in top_level)
    assert 'if __name__ == "__main__":' in script


def test_the_tutorial_worker_example_delivers_its_first_batch_within_five_seconds():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "train_workers.py"), "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=scaled(300),
        env=env,
    )
    assert done.returncode == 0, done.stderr
    first = float(re.search(r"first batch after ([0-9.]+) s", done.stdout).group(1))
    assert first < scaled(5.0), "the first batch took %.1f s: do the workers compile the model?" % first


def batches(n, base):
    return [np.full(4, base + i, "float32") for i in range(n)]


@pytest.mark.parametrize("first_runs_out_first", [True, False])
def test_two_feeders_for_one_epoch_as_the_tutorial_starts_them(first_runs_out_first):
    q = tq.Queue([("x", "float32", (4,))], capacity=8, target="cpu")
    first = tq.Feeder(q, batches(2 if first_runs_out_first else 6, 0)).start()
    if first_runs_out_first:
        first.join(10)  # done, and the epoch still open for the second: the consumer has not met its end
    second = tq.Feeder(q, batches(3, 100)).start()
    taken = []
    while True:
        try:
            taken.append(int(q.get(timeout=20)[0][0]))
        except tq.QueueClosed:
            break
    assert sorted(taken) == sorted(list(range(2 if first_runs_out_first else 6)) + [100, 101, 102])
    first.close()
    second.close()
