"""The GPU half of tests/cpu/test_worker_processes.py: worker processes next to a parent on the GPU.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_worker_processes_gpu.py``."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from worker_checks import assert_same, drain, expected
from worker_datasets import SPEC, InPlace, Tagged
from worker_processes_helpers import SCRIPT_HEAD, killed_parent_leaves_nothing, run_env

import theano_queue as tq

pytestmark = pytest.mark.gpu


def gpu_env():
    env = run_env()
    env.pop("THEANO_GPU_IS_ALREADY_ACTIVE", None)
    return env


WORKERS_ON_A_GPU_SCRIPT = SCRIPT_HEAD + textwrap.dedent(
    """
    import theano  # device=cuda0: this process has a CUDA context ...
    from worker_datasets import Environment
    if __name__ == "__main__":
        q = tq.Queue(Environment.SPEC, capacity=2)
        assert q.on_gpu
        f = theano.function([], q.dequeue())
        with tq.Feeder(q, Environment(), workers=2):  # ... and its workers none
            flags = [f() for _ in range(4)]
        print("ok" if all(np.asarray(g).all() for g in flags) else "cuda in a worker: %s" % flags)
    """
).replace("import theano  #", "import numpy as np, theano  #")


@pytest.mark.gpu
@pytest.mark.parametrize("ordered", [True, False])
def test_workers_feed_a_gpu_queue_bit_exact(ordered):
    import theano

    q = tq.Queue(SPEC, capacity=3)
    assert q.on_gpu
    x, y = q.dequeue()
    f = theano.function([], [x, y, (x * 2).sum()])
    assert "GpuDequeue" in [type(n.op).__name__ for n in f.maker.fgraph.toposort()]
    with tq.Feeder(q, Tagged(203, jitter=0.0005), workers=3, shuffle=True, seed=2, epochs=2, ordered=ordered):
        got = drain(f)
    want = expected(203, epochs=2, shuffle=True, seed=2)
    got = [g[:2] for g in got]
    if ordered:
        assert_same(got, want)
    else:
        by_key = {tuple(w[1]): w for w in want}
        assert sorted(by_key) == sorted(tuple(g[1]) for g in got)
        assert_same(got, [by_key[tuple(g[1])] for g in got])


@pytest.mark.gpu
def test_read_into_the_pinned_staging_of_a_gpu_queue():
    import theano

    from theano_queue import _engine

    q = tq.Queue(InPlace.SPEC, capacity=2)
    assert _engine.cuda_allocated()["pinned"] >= q._ring.staging_bytes, "the staging is page-locked"
    f = theano.function([], q.dequeue())
    with tq.Feeder(q, InPlace(50), workers=2):
        got = drain(f)
    for (x, where), (want_x, want_y) in zip(got, expected(50)):
        assert np.array_equal(x, want_x) and np.array_equal(where[:, 0], want_y) and (where[:, 2] == 1).all()
    assert len(got) == 7


@pytest.mark.gpu
def test_workers_never_initialise_cuda_when_the_parent_runs_on_a_gpu():
    done = subprocess.run(
        [sys.executable, "-c", WORKERS_ON_A_GPU_SCRIPT], capture_output=True, text=True, env=gpu_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok"), done.stdout


@pytest.mark.gpu
def test_a_killed_parent_with_a_gpu_queue_leaves_nothing():
    killed_parent_leaves_nothing(None, gpu_env())
