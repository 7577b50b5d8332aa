"""The engine's Permutation: an epoch's order made in idle time, off the GIL, with numpy's draws."""

import ctypes
import os
import sys
import time

import numpy as np
import pytest

from theano_queue import _engine
from theano_queue.core.errors import QueueError


def bits(*seed):
    return np.random.PCG64(np.random.SeedSequence(list(seed)))


def numpys(n, *seed):
    return np.random.Generator(bits(*seed)).permutation(n)


def native_threads():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 1000, 4097, 200_003])
def test_the_order_is_numpys_permutation(n):
    """The same bit generator gives the order numpy's Generator.permutation gives: an epoch's order must not
    depend on whether it was made ahead, and a saved run resumes on the orders it had."""
    for seed in ([0, 0], [5, 1], [2**40, 7]):
        permutation = _engine.Permutation(bits(*seed), n)
        got = permutation.result()
        permutation.close()
        assert got.dtype == np.int64 and np.array_equal(got, numpys(n, *seed))


def test_the_permutation_is_made_beside_the_caller_without_the_gil():
    """A permutation of many chunks completes while the calling thread holds the GIL all along (asleep in a C
    call that keeps it, so that its core is free), without being asked for.  (On a machine whose every core
    is busy it gets about 0.3 % of one: 300,000 rows then take about a second.)"""
    keeps_the_gil = ctypes.PyDLL(None)  # a PyDLL's calls do not release the GIL
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)  # and no other Python thread takes it between two calls
    try:
        permutation = _engine.Permutation(bits(1, 2), 300_000)
        for _ in range(300):  # 30 s at most
            if permutation.done():
                break
            keeps_the_gil.usleep(100_000)
        done = permutation.done()
    finally:
        sys.setswitchinterval(interval)
    assert done
    assert np.array_equal(permutation.result(), numpys(300_000, 1, 2))
    permutation.close()


def test_result_right_after_the_start_is_the_whole_permutation():
    """result() never hands out a half-made order: what the thread has not done, the caller does."""
    for n in (10, 3_000_000):
        permutation = _engine.Permutation(bits(3), n)
        assert np.array_equal(permutation.result(), numpys(n, 3))
        assert permutation.done()
        permutation.close()


def test_close_ends_a_permutation_in_the_making_and_its_thread():
    before = native_threads()
    permutation = _engine.Permutation(bits(4), 5_000_000)
    began = time.monotonic()
    permutation.close()
    permutation.close()  # twice is allowed
    assert time.monotonic() - began < 1.0
    assert native_threads() == before
    for asked in (permutation.result, permutation.done):
        with pytest.raises(QueueError, match=r"Permutation\.\w+: closed"):
            asked()


def test_a_dropped_permutation_ends_its_thread():
    before = native_threads()
    for _ in range(50):
        _engine.Permutation(bits(6), 100_000)  # each freed at once
    assert native_threads() == before


def test_a_negative_length_is_refused():
    with pytest.raises(ValueError, match="Permutation: expected n >= 0, got -1"):
        _engine.Permutation(bits(0), -1)


@pytest.mark.parametrize("generator", [np.random.default_rng(0), None, 7], ids=["Generator", "None", "int"])
def test_anything_but_a_bit_generator_is_refused(generator):
    with pytest.raises(TypeError, match=r"Permutation: expected a numpy BitGenerator \(e.g. numpy.random.PCG64\)"):
        _engine.Permutation(generator, 10)


@pytest.mark.parametrize("n", [0, 1, 5, 200_003])
def test_the_function_is_the_same_permutation_made_on_the_calling_thread(n):
    assert np.array_equal(_engine.permutation(bits(9, n), n), numpys(n, 9, n))
    with pytest.raises(ValueError, match="expected n >= 0"):
        _engine.permutation(bits(0), -5)


def test_close_without_waiting_ends_the_making_once_its_thread_has_returned():
    """close(wait=False) never waits for the thread (which may get no core): it tells it to stop, and says
    whether it has returned; a later call ends it."""
    before = native_threads()
    permutation = _engine.Permutation(bits(8), 20_000_000)
    deadline = time.monotonic() + 10
    while not permutation.close(wait=False):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert native_threads() == before
    with pytest.raises(QueueError, match="Permutation.result: closed"):
        permutation.result()
    assert permutation.close(wait=False) and permutation.close()


def test_a_forked_child_neither_joins_nor_asks_the_parents_thread():
    """A child of fork() has no copy of the permutation's thread: asking it is refused, freeing it is safe."""
    permutation = _engine.Permutation(bits(10), 5_000_000)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if result() is refused and close() returns
        code = 1
        try:
            permutation.result()
        except QueueError as exc:
            code = 0 if "made in another process" in str(exc) else 2
        permutation.close()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert np.array_equal(permutation.result(), numpys(5_000_000, 10))
    permutation.close()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_permutations_thread_runs_in_idle_time_only():
    """The thread takes no core that another thread wants (SCHED_IDLE): beside a training step on two cores,
    one that competed took the core the Feeder was woken for."""

    def idle_threads():
        found = []
        for task in os.listdir("/proc/self/task"):
            try:
                if os.sched_getscheduler(int(task)) == os.SCHED_IDLE:
                    found.append(task)
            except ProcessLookupError:
                pass  # a thread that ended meanwhile
        return found

    before = idle_threads()
    permutation = _engine.Permutation(bits(11), 30_000_000)
    try:
        deadline = time.monotonic() + 5
        while len(idle_threads()) == len(before) and not permutation.done() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(idle_threads()) == len(before) + 1
    finally:
        permutation.close()
