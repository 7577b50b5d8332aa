"""Datasets for the worker tests.  numpy only: spawned workers import this module quickly."""

import ctypes
import mmap
import os
import signal
import time

import numpy as np

import theano_queue as tq

ROWS = 8
SPEC = [("x", "float32", (ROWS, 5, 3)), ("y", "int64", (ROWS,))]


def sample(i):
    """Sample i of Tagged: random data drawn from i, and i itself."""
    return np.random.default_rng(i).standard_normal((5, 3)).astype("float32"), np.int64(i)


def expected_batch(indices):
    xs, ys = zip(*(sample(int(i)) for i in indices))
    return np.stack(xs), np.array(ys, dtype="int64")


class Tagged:
    """Map-style: sample i is sample(i).  Some samples take longer, so that workers finish out of turn."""

    def __init__(self, n, jitter=0.0, fail_at=None, kill_at=None, slow=(), slow_s=0.0):
        """slow: the indices that take slow_s seconds more ("all" for every one)."""
        self.n, self.jitter, self.fail_at, self.kill_at = n, jitter, fail_at, kill_at
        self.slow, self.slow_s = slow if slow == "all" else set(slow), slow_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.jitter:
            time.sleep(self.jitter * ((i * 7919) % 5) / 4)
        if self.slow == "all" or i in self.slow:
            time.sleep(self.slow_s)
        if i == self.fail_at:
            decode_failure(i)
        if i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = sample(i)
        return {"y": y, "x": x} if i % 2 else (x, y)


def decode_failure(i):
    raise ValueError("cannot decode sample %d" % i)


def mapping_address(buffer):
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


class InPlace:
    """Map-style with read_into: writes the sample into the row it is given, and says where that row was.

    ``where`` holds the byte offset of the row of ``x`` from the start of the
    shared staging (in a worker) and whether the row was a view of the slot.
    Its __getitem__ fails, so a feeder that copied would be caught.
    """

    SPEC = [("x", "float32", (ROWS, 5, 3)), ("where", "int64", (ROWS, 3))]

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        raise AssertionError("read_into must be used, not __getitem__")

    def read_into(self, i, row):
        x, where = row  # unpacks like a tuple ...
        assert row["x"] is x  # ... and is indexed by name
        x[...] = sample(i)[0]
        base = x
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        in_staging = isinstance(base, mmap.mmap)
        offset = x.__array_interface__["data"][0] - mapping_address(base) if in_staging else -1
        owner = type(base).__name__
        where[...] = (i, offset, {"mmap": 1, "Ring": 2}.get(owner, 0))


class Shards:
    """Iterable of whole batches: batch b carries b; each worker yields the batches b = id mod count."""

    def __init__(self, batches, fail_at=None):
        self.batches, self.fail_at = batches, fail_at

    def __iter__(self):
        me, count = tq.worker_info()
        for b in range(me, self.batches, count):
            if b == self.fail_at:
                raise KeyError("batch %d is missing" % b)
            rows = 1 + b % ROWS
            yield expected_batch(range(b * ROWS, b * ROWS + rows))


class Environment:
    """Map-style: each sample says what the worker's environment says about CUDA."""

    SPEC = [("flags", "uint8", (1, 3))]

    def __len__(self):
        return 4

    def __getitem__(self, i):
        flags = os.environ.get("THEANO_FLAGS", "")
        with open("/proc/self/maps") as f:
            maps = f.read()
        return (
            np.array(
                [
                    flags.split(",")[-1] == "device=cpu",
                    os.environ.get("CUDA_VISIBLE_DEVICES") == "",
                    "libcuda" not in maps,
                ],
                dtype="uint8",
            ),
        )


class Heavy:
    """Map-style: per-sample numpy work of about `ms` milliseconds."""

    def __init__(self, n, ms=2.0):
        self.n, self.ms = n, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        end = time.perf_counter() + self.ms / 1e3
        while time.perf_counter() < end:
            pass
        return sample(i)


# ---- variable-length samples (tests/cpu/test_varlen_feeding.py) ----------------------------------------

BOUND = 12
RAGGED_SPEC = [("tokens", "int32", (ROWS, tq.upto(BOUND))), ("label", "int64", (ROWS,))]


def ragged_length(i):
    """Sample i's length: 0 and the bound among them."""
    return (i * 7) % (BOUND + 1)


def ragged_sample(i):
    return np.arange(ragged_length(i), dtype="int32") + 1000 * i, np.int64(i)


class Ragged:
    """Map-style: sample i holds ragged_length(i) tokens and its label i."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return ragged_sample(i)


# ---- start-up (tests/cpu/test_worker_startup.py) --------------------------------------------------------


def _block_forever(state):
    time.sleep(3600)


class HangsWhenUnpickled(Tagged):
    """Map-style like Tagged, but a worker that unpickles it waits an hour (a lock, a server that never answers)."""

    def __reduce__(self):
        return _block_forever, (self.n,)


def _busy_then_tagged(n, seconds):
    """Unpickles into Tagged(n) after `seconds` of processor work (a slow import, a large index built)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return Tagged(n)


class SlowToUnpickle(Tagged):
    def __init__(self, n, seconds):
        super().__init__(n)
        self.seconds = seconds

    def __reduce__(self):
        return _busy_then_tagged, (self.n, self.seconds)


def _spin_in_worker_0_then_tagged(n):
    """Unpickles into Tagged(n), but worker 0 spins first (processor time, no progress) until it is killed."""
    if tq.worker_info().id == 0:
        while True:
            pass
    return Tagged(n)


class SpinsWhenUnpickledInWorker0(Tagged):
    """Map-style like Tagged; worker 0's unpickling spins for ever (a __setstate__ stuck in a busy loop)."""

    def __reduce__(self):
        return _spin_in_worker_0_then_tagged, (self.n,)
