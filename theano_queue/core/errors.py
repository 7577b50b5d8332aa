"""The exceptions a queue raises.  All derive from :class:`QueueError`."""

import sys
from typing import Any, Optional

# What Theano (and PyTensor) append when they re-raise an Op's exception from a compiled function: a new
# instance of its type, made with this message, while the Op's is being handled.
GRAPH_DUMP = "\nApply node that caused the error"


class QueueError(Exception):
    """Base class of every error theano_queue raises on purpose.

    Raised by a node of a compiled function, it keeps its own message: the
    node dump Theano appends (the Apply node, its inputs, where the graph was
    built) says nothing the message does not, and pushed the one line that
    names the fix off the screen.  ``graph_hint``, where a class has one, is
    added to that line instead.
    """

    graph_hint = ""

    def __init__(self, *args: object) -> None:
        handled = sys.exc_info()[1]
        if (
            len(args) == 1
            and isinstance(args[0], str)
            and type(handled) is type(self)
            and handled is not self
            and args[0].startswith(str(handled) + GRAPH_DUMP)
        ):
            args = (str(handled) + self.graph_hint,)
            # One error, not "during handling of the above exception" and the same message again.
            self.__suppress_context__ = True
        super().__init__(*args)


class QueueClosed(QueueError):
    """Dequeue from a closed queue that has been drained, or put into a closed queue.

    A training loop catches it to end an epoch.
    """

    graph_hint = "; the epoch is over: catch tq.QueueClosed to end it, and q.reopen() the queue for the next one"


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


class SeveralDequeuesWarning(UserWarning):
    """One compiled function takes more than one element of a queue per call (several ``q.dequeue()`` calls).

    Warned once per queue, at compile time.  Where it is meant (two batches a
    step), ``warnings.filterwarnings("ignore", category=SeveralDequeuesWarning)``.
    """


class CudaError(QueueError, RuntimeError):
    """A CUDA driver call failed; the message names the call and the CUDA error.

    Out of device memory is a CudaError whose message names
    ``CUDA_ERROR_OUT_OF_MEMORY``; out of host memory (pinned memory included)
    is a :class:`MemoryError`.  ``status`` is the driver's status code where
    one is known (:mod:`theano_queue.tools.probe` sets it), else None.
    """

    status: Optional[int] = None


class Stopped(QueueError):
    """A put whose stop flag was set while it waited: how :meth:`Feeder.stop` wakes its thread.

    The Feeder catches it; user code does not see it.
    """
