"""Feeder worker processes as processes: CUDA kept out of them, Ctrl-C, interpreter exit and a killed parent
leave nothing behind, on the CPU and on a GPU queue."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from helpers import seconds_to_stop_on_ctrl_c
from worker_checks import assert_same, drain, expected, getter, wait_gone
from worker_datasets import SPEC, Environment, InPlace, Tagged

import theano_queue as tq

TESTS = os.path.dirname(os.path.abspath(__file__))


def test_workers_are_told_not_to_use_cuda(monkeypatch):
    monkeypatch.setenv("THEANO_FLAGS", os.environ.get("THEANO_FLAGS", "") + ",device=cuda0")
    q = tq.Queue(Environment.SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Environment(), workers=1):
        got = drain(getter(q))
    assert len(got) == 4 and all(g[0].all() for g in got), got
    assert os.environ["THEANO_FLAGS"].endswith("device=cuda0"), "the parent's environment is left as it was"


SCRIPT_HEAD = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, %r)
    import theano_queue as tq
    from worker_datasets import SPEC, Tagged
    """
    % TESTS
)


def run_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([TESTS] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


CTRL_C_SCRIPT = SCRIPT_HEAD + textwrap.dedent(
    """
    import theano
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    f = theano.function([], q.dequeue())
    try:
        with tq.Feeder(q, Tagged(10**6, slow="all", slow_s=0.5), workers=2, epochs=None) as feeder:
            pids = feeder.stats()["pids"]
            print("ready", flush=True)
            while True:
                f()
    except KeyboardInterrupt:
        sys.exit(3 if not any(os.path.exists("/proc/%d/cmdline" % p) and
                              open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[0] != "Z"
                              for p in pids) else 4)
    """
)


def test_ctrl_c_stops_the_loop_and_every_worker():
    # SIGINT to the whole process group, as a terminal sends it: the workers ignore it, the loop stops them.
    # Exit status 3: no worker was left when the interrupt reached the loop.  The time runs to the
    # process's end: the shutdown's own waits (under 2 s, workers.py) and the interpreter's exit,
    # which a loaded machine slows (seconds at a load of 7 on 2 cores).
    elapsed = seconds_to_stop_on_ctrl_c(CTRL_C_SCRIPT, run_env(), group=True)
    assert elapsed < 20.0, "took %.2f s" % elapsed


EXIT_SCRIPT = SCRIPT_HEAD + textwrap.dedent(
    """
    q = tq.Queue(SPEC, capacity=2, target="cpu")
    feeder = tq.Feeder(q, Tagged(10**6, slow="all", slow_s=60), workers=2, epochs=None).start()
    while feeder.stats().get("startup_s") is None:
        time.sleep(0.02)
    print(" ".join(map(str, feeder.stats()["pids"])), flush=True)
    # and the interpreter exits without closing anything
    """
)


def test_interpreter_exit_stops_every_worker():
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, env=run_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2 and wait_gone(pids, 0.5) == []
    assert time.monotonic() - started < 30


KILLED_PARENT_SCRIPT = SCRIPT_HEAD + textwrap.dedent(
    """
    q = tq.Queue(SPEC, capacity=2, target=%r)
    feeder = tq.Feeder(q, Tagged(10**6, jitter=0.01), workers=2, epochs=None).start()
    q.get(timeout=60)
    print("ready", flush=True)
    time.sleep(120)
    """
)


def descendants(root):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def shm_names():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def killed_parent_leaves_nothing(target, env):
    before = shm_names()
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_PARENT_SCRIPT % target],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line == "ready", proc.stderr.read()[-3000:] if proc.poll() is not None else line
        left = descendants(proc.pid)
        assert len(left) >= 2, "the workers run"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert wait_gone(left, 2.0) == [], "processes left behind"
    finally:
        proc.kill()
    assert not [n for n in shm_names() - before if "theano_queue" in n], "shared memory left in /dev/shm"


def test_a_killed_parent_leaves_no_process_and_no_shared_memory():
    killed_parent_leaves_nothing("cpu", run_env())


# ---- on the GPU ---------------------------------------------------------------------------------


def gpu_env():
    env = run_env()
    env.pop("THEANO_GPU_IS_ALREADY_ACTIVE", None)
    return env


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
def test_workers_never_initialise_cuda_when_the_parent_runs_on_a_gpu():
    done = subprocess.run(
        [sys.executable, "-c", WORKERS_ON_A_GPU_SCRIPT], capture_output=True, text=True, env=gpu_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok"), done.stdout


@pytest.mark.gpu
def test_a_killed_parent_with_a_gpu_queue_leaves_nothing():
    killed_parent_leaves_nothing(None, gpu_env())
