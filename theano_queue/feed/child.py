"""What runs in a worker process: map the shared staging, then write the items the parent sends.

A worker never touches the queue's Ring (with ``fork`` it inherits it, and
the engine refuses a Ring of another process): only the staging it maps.  It
ignores SIGINT (Ctrl-C is the parent's to handle) and dies with the process
that started it (``PR_SET_PDEATHSIG``) and with the Feeder's process (a watch
on its pidfd).  A map-style batch with variable-length components is given to
one worker whole, which packs it before it says DONE: the parent only commits.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import pickle
import random
import select
import signal
import threading
import time

import numpy as np

from . import protocol as p
from .check import batch_writer
from .info import set_worker_info
from .rows import RowWriter, SampleError
from .sources import stream

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid):
    """SIGKILL when the process (thread) that started us ends; exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def _watch_owner(owner_pid):
    """A thread that ends this process once the Feeder's process is gone (forkserver: not our parent)."""

    def watch():
        try:
            fd = os.pidfd_open(owner_pid)
        except ProcessLookupError:
            os._exit(1)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            select.select([fd], [], [])
            os._exit(1)
        while True:  # no pidfd: poll
            time.sleep(0.2)
            try:
                os.kill(owner_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="tq-owner-watch", daemon=True).start()


class StagingLayout:
    """Where the (engine's) components of a slot lie in the shared staging, and views of them.

    ``queue_layout`` is the queue's :class:`~theano_queue.core.layout.Layout`: the
    user's components, which samples and batches are written as.
    """

    def __init__(self, queue_layout, component_offsets, staging_bytes):
        self.queue_layout = queue_layout
        self.components = queue_layout.engine
        self.offsets = component_offsets
        self.bytes = staging_bytes

    def views(self, buffer, slot_offset):
        return tuple(
            np.ndarray(c.shape, c.dtype, buffer, slot_offset + off) for c, off in zip(self.components, self.offsets)
        )


class _Timer:
    busy = 0.0


def _load(payload):
    """The dataset as the parent sent it: cloudpickle's bytes are read by plain pickle."""
    return pickle.loads(payload)


class _Noting:
    """The dataset as the row writer sees it: each sample's index is noted in shared memory before it is read,
    so that the parent's timeout can name the sample that hangs."""

    def __init__(self, dataset, current, wid):
        self.dataset, self.current, self.wid = dataset, current, wid

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        self.current[self.wid] = index
        return self.dataset[index]


class _NotingInto(_Noting):
    def read_into(self, index, row):
        self.current[self.wid] = index
        return self.dataset.read_into(index, row)


def worker_main(wid, count, conn, staging, layout, dataset, mode, config, owner_pid, parent_pid, current):
    """The body of a worker process: map the staging, then serve work items until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with_parent(parent_pid)
    _watch_owner(owner_pid)
    os.environ.update(p.worker_env())
    set_worker_info(wid, count)
    try:
        fd = staging.detach()
        buffer = mmap.mmap(fd, layout.bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)
        conn.send_bytes(p.phase_reply(p.UNPICKLING))  # imported: the parent's start-up clock knows
        if dataset is None:  # pickled, it comes over the pipe (Process.start() would wait for us to read it)
            dataset = _load(conn.recv_bytes())
        conn.send_bytes(p.phase_reply(p.OPENING))
        seed = np.random.SeedSequence([config["seed"], wid]).generate_state(2)
        random.seed(int(seed[0]))
        np.random.seed(int(seed[1]))
        if mode == "map":
            noting = _NotingInto if getattr(dataset, "read_into", None) is not None else _Noting
            writer = RowWriter(layout.queue_layout, noting(dataset, current, wid), config["queue"])
        else:
            timer = _Timer()
            elements = stream(dataset, config["epochs"], config["skip"][wid], timer)
    except BaseException as exc:  # reported, then this worker is of no use
        conn.send_bytes(p.error_reply(-1, -1, exc))
        return
    conn.send_bytes(p.REPLY.pack(p.READY, 0, os.getpid(), 0.0))
    views = {}
    produced = config["skip"][wid] if mode == "iter" else 0
    varying = layout.queue_layout.varying
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent is gone
        began = time.perf_counter()
        kind = message[0]
        if kind == p.STOP:
            return
        if kind == p.MAP:
            _, tag, offset, row0, rows = p.MAP_ITEM.unpack_from(message)
            indices = np.frombuffer(message, np.int64, rows, p.MAP_ITEM.size).tolist()
            slot = views.get(offset) or views.setdefault(offset, layout.views(buffer, offset))
            try:
                writer.fill(slot, row0, indices)
                packed = writer.pack(slot, rows) if varying else []  # a whole batch: see the module's doc
            except SampleError as exc:
                conn.send_bytes(p.error_reply(tag, exc.index, exc.__cause__))
                continue
            except Exception as exc:  # packing refused the lengths written
                conn.send_bytes(p.error_reply(tag, indices[0], exc))
                continue
            conn.send_bytes(
                p.REPLY.pack(p.DONE, tag, 0, time.perf_counter() - began) + np.asarray(packed, np.int64).tobytes()
            )
        else:
            _, tag, offset = p.ITER_ITEM.unpack_from(message)
            slot = views.get(offset) or views.setdefault(offset, layout.views(buffer, offset))
            timer.busy = 0.0
            try:
                element = next(elements)
                rows = batch_writer(layout.queue_layout, element, config["queue"])(slot)
            except StopIteration:
                conn.send_bytes(p.REPLY.pack(p.END, tag, produced, 0.0))
                continue
            except Exception as exc:
                conn.send_bytes(p.error_reply(tag, produced, exc))
                continue
            produced += 1
            conn.send_bytes(
                p.REPLY.pack(p.DONE, tag, 0, time.perf_counter() - began) + np.asarray(rows, np.int64).tobytes()
            )
