"""The exceptions a queue raises.  All derive from :class:`QueueError`."""

import sys
from typing import Any, Optional


class QueueError(Exception):
    """Base class of every error theano_queue raises on purpose."""


class QueueClosed(QueueError):
    """Dequeue from a closed queue that has been drained, or put into a closed queue.

    A training loop catches it to end an epoch.
    """


class QueueTimeout(QueueError, TimeoutError):
    """A put or dequeue waited longer than its timeout."""


class FeederError(QueueError):
    """The feeder's source raised, or one of its worker processes failed.

    Raised at the dequeue once every element produced before the failure has
    been taken.  ``__cause__`` is the source's own exception, traceback kept.
    When a sample of a map-style dataset or a worker process failed, the
    cause is itself a FeederError that says which: ``index`` (the sample's
    index in the dataset, or the element's number in a worker's stream),
    ``worker`` (the worker's id; None without workers) and
    ``worker_traceback`` (the traceback's text, as the worker printed it; its
    message includes it too).  These attributes read through to the cause, so
    ``err.index`` works on the error the consumer catches.
    """

    index: Optional[int] = None
    worker: Optional[int] = None
    worker_traceback: Optional[str] = None

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if value is None and name in ("index", "worker", "worker_traceback"):
            cause = super().__getattribute__("__cause__")
            if isinstance(cause, FeederError):
                return getattr(cause, name)
        return value

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        # Theano re-raises an Op's exception as a new instance of its type with
        # a longer message, built while the original is being handled: carry
        # the original's cause over, or the source's exception would be lost.
        handled = sys.exc_info()[1]
        if isinstance(handled, FeederError) and handled is not self and handled.__cause__ is not None:
            self.__cause__ = handled.__cause__


class CudaError(QueueError, RuntimeError):
    """A CUDA driver call failed; the message names the call and the CUDA error.

    Out of device memory is a CudaError whose message names
    ``CUDA_ERROR_OUT_OF_MEMORY``; out of host memory (pinned memory included)
    is a :class:`MemoryError`.  ``status`` is the driver's status code where
    one is known (:mod:`theano_queue.probe` sets it), else None.
    """

    status: Optional[int] = None


class Stopped(QueueError):
    """A put whose stop flag was set while it waited: how :meth:`Feeder.stop` wakes its thread.

    The Feeder catches it; user code does not see it.
    """
