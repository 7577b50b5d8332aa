"""Queues and fork(): a forked child makes and uses its own queues; a queue it
inherited from its parent refuses to work there, with a message that says so.

Each case runs in a fresh interpreter that forks, and every wait has a limit:
a hang fails the test instead of hanging it.
"""

import os
import subprocess
import sys
import textwrap

from timing import scaled

# The parent makes the copy pool exist (a put of 4 MiB, 4 copy threads) before
# it forks: that is the state in which a child's large copy used to hang.
PARENT = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import theano_queue as tq
    from theano_queue import _engine

    MIB4 = [("x", "uint8", (4 << 20,))]
    _engine.set_copy_threads(4)
    parent_q = tq.Queue(MIB4, capacity=2, target="cpu", name="parents")
    parent_q.put(np.ones(4 << 20, "uint8"))
    assert parent_q.get()[0].sum() == 4 << 20

    def round_trip(value):
        q = tq.Queue(MIB4, capacity=2, target="cpu", name="childs")
        data = (np.arange(4 << 20) * value).astype("uint8")
        q.put(data)
        return bool(np.array_equal(q.get(timeout=10)[0], data))

    def wait_for(pid, seconds=20):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.02)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("the child hung", flush=True)
        return 99
    """
)


def run(script, timeout=scaled(60)):
    done = subprocess.run(
        [sys.executable, "-c", PARENT + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    return done.returncode, done.stdout + done.stderr


def test_a_child_of_os_fork_makes_and_uses_its_own_queue():
    code, out = run(
        """
        pid = os.fork()
        if pid == 0:
            try:
                os._exit(0 if round_trip(3) else 1)
            except BaseException as exc:
                print("child:", repr(exc), flush=True)
                os._exit(2)
        sys.exit(wait_for(pid))
        """
    )
    assert code == 0, out


def test_workers_of_a_fork_pool_make_and_use_their_own_queues():
    code, out = run(
        """
        import multiprocessing
        with multiprocessing.get_context("fork").Pool(2) as pool:
            print(pool.map_async(round_trip, [1, 2, 3, 5]).get(timeout=20), flush=True)
        """
    )
    assert code == 0 and "[True, True, True, True]" in out, out


def test_a_queue_inherited_from_the_parent_is_refused_with_a_clear_error():
    code, out = run(
        """
        import gc
        import theano
        parent_q.put(np.zeros(4 << 20, "uint8"))
        dequeue = theano.function([], parent_q.dequeue().sum())
        pid = os.fork()
        if pid == 0:
            calls = {
                "Queue.get": lambda: parent_q.get(timeout=1),
                "Queue.put": lambda: parent_q.put(np.zeros(4 << 20, "uint8"), timeout=1),
                "Queue.writer": lambda: parent_q.writer(timeout=1).__enter__(),
                "Queue.size": parent_q.size,
                "Queue.close": parent_q.close,
                "Ring.staging_fd": parent_q._ring.staging_fd,  # worker processes map the staging instead
                "Dequeue": dequeue,
            }
            wrong = []
            for who, call in calls.items():
                try:
                    call()
                    wrong.append("%s worked" % who)
                except tq.QueueError as exc:
                    text = str(exc)
                    if not (who in text and "queue 'parents' was made in another process" in text
                            and "the child must make its own queue" in text):
                        wrong.append("%s: %s" % (who, text))
            del parent_q, dequeue  # dropping the parent's ring must not touch it
            gc.collect()
            print("\\n".join(wrong), flush=True)
            os._exit(1 if wrong else 0)
        code = wait_for(pid)
        assert parent_q.size() == 1, "the parent's queue is intact"
        sys.exit(code)
        """
    )
    assert code == 0, out
