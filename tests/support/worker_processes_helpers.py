"""What tests/cpu/test_worker_processes.py and tests/gpu/test_worker_processes_gpu.py share."""

import os
import signal
import subprocess
import sys
import textwrap

from worker_checks import wait_gone

SUPPORT = os.path.dirname(os.path.abspath(__file__))  # the helper modules


SCRIPT_HEAD = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, %r)
    import theano_queue as tq
    from worker_datasets import SPEC, Tagged
    """
    % SUPPORT
)


def run_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SUPPORT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


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
