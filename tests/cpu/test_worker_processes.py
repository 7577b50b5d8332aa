"""Feeder worker processes as processes: CUDA kept out of them, Ctrl-C, interpreter exit and a killed parent
leave nothing behind, on the CPU and on a GPU queue."""

import os
import subprocess
import sys
import textwrap
import time

from helpers import seconds_to_stop_on_ctrl_c
from worker_checks import drain, getter, wait_gone
from worker_datasets import Environment
from worker_processes_helpers import (
    SCRIPT_HEAD,
    killed_parent_leaves_nothing,
    run_env,
)

import theano_queue as tq


def test_workers_are_told_not_to_use_cuda(monkeypatch):
    monkeypatch.setenv("THEANO_FLAGS", os.environ.get("THEANO_FLAGS", "") + ",device=cuda0")
    q = tq.Queue(Environment.SPEC, capacity=2, target="cpu")
    with tq.Feeder(q, Environment(), workers=1):
        got = drain(getter(q))
    assert len(got) == 4 and all(g[0].all() for g in got), got
    assert os.environ["THEANO_FLAGS"].endswith("device=cuda0"), "the parent's environment is left as it was"


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


def test_a_killed_parent_leaves_no_process_and_no_shared_memory():
    killed_parent_leaves_nothing("cpu", run_env())


# ---- on the GPU ---------------------------------------------------------------------------------
