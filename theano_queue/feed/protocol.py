"""What the Feeder's process and its worker processes say to each other over a pipe.

Parent -> worker: one kind byte, then a struct (and, for a map item, the
int64 sample indices).  Worker -> parent: :data:`REPLY`, then a payload: the
engine rows of an element the worker packed (int64), or an error.
"""

from __future__ import annotations

import os
import pickle
import struct
import traceback
from multiprocessing import reduction

MAP, ITER, STOP = 1, 2, 3
MAP_ITEM = struct.Struct("<Bqqqq")  # kind, tag, slot offset, first row, rows; then int64 indices
ITER_ITEM = struct.Struct("<Bqq")  # kind, tag, slot offset
READY, DONE, END, ERROR, PHASE = 1, 2, 3, 4, 5
REPLY = struct.Struct("<Bqqd")  # kind, tag, index (pid for READY, the phase for PHASE), busy seconds; then the payload

# A worker's start-up, in order: the parent knows the first (the process runs the interpreter and, under
# spawn or forkserver, imports the main script again); the worker says PHASE when it enters the others.
IMPORTING, UNPICKLING, OPENING = 0, 1, 2
PHASES = {
    IMPORTING: "importing the main script (spawn and forkserver run it again)",
    UNPICKLING: "unpickling the dataset",
    OPENING: "opening the dataset",
}


class SharedFd:
    """A file descriptor handed to a worker: duplicated into spawn/forkserver children, inherited by fork."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _rebuild_fd, (reduction.DupFd(self.fd),)

    def detach(self) -> int:
        return self.fd


def _rebuild_fd(dup):
    return SharedFd(dup.detach())


def phase_reply(phase: int) -> bytes:
    return REPLY.pack(PHASE, 0, phase, 0.0)


def error_reply(tag: int, index: int, exc: BaseException) -> bytes:
    """An ERROR reply: the exception itself where it pickles (so the consumer sees its class), its text always."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001  (a broken __str__ must not hide the failure)
        message = "<unprintable %s>" % type(exc).__name__
    try:
        original = pickle.dumps(exc.with_traceback(None))
        pickle.loads(original)
    except Exception:  # noqa: BLE001  (not every exception pickles; its text is enough then)
        original = None
    return REPLY.pack(ERROR, tag, index, 0.0) + pickle.dumps((type(exc).__name__, message, text, original))


def read_error(message: bytes):
    """(class name, message, traceback text, the exception or None) of an ERROR reply."""
    name, text, tb, original = pickle.loads(message[REPLY.size :])
    exc = None
    if original is not None:
        try:
            exc = pickle.loads(original)
        except Exception:  # noqa: BLE001
            exc = None
    return name, text, tb, exc


def worker_env() -> dict:
    """What a worker's environment must say so that it never initialises CUDA."""
    flags = [
        f
        for f in os.environ.get("THEANO_FLAGS", "").split(",")
        if f and not f.strip().startswith(("device=", "init_gpu_device=", "contexts="))
    ]
    return {"THEANO_FLAGS": ",".join(flags + ["device=cpu"]), "CUDA_VISIBLE_DEVICES": ""}
