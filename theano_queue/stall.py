"""A dequeue that waits long says so.

With ``timeout=None`` a dequeue waits as long as it takes, and a training
function called with no producer running would wait in silence.  Once a
dequeue has waited :func:`set_stall_warning`'s time (30 s unless set), one
warning goes to the ``theano_queue`` logger per wait, naming the queue, how
many Feeders are attached to it and what its ring holds.  The engine decides
when (``c_code/tq_py_element.c``, the one wait loop); this module says what.
Imports no Theano.
"""

import logging
import numbers
import weakref
from typing import Optional

from . import _engine

logger = logging.getLogger("theano_queue")

#: Seconds a dequeue waits before its warning, unless :func:`set_stall_warning` says otherwise.
DEFAULT_STALL_WARNING_S = 30.0


def set_stall_warning(seconds: Optional[float]) -> Optional[float]:
    """Warn once a dequeue has waited ``seconds`` (None: never); returns the previous setting.

    >>> import theano_queue as tq
    >>> previous = tq.set_stall_warning(5.0)    # tests and short experiments: warn sooner
    >>> tq.set_stall_warning(previous)
    5.0
    """
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, numbers.Real)):
        raise TypeError("set_stall_warning: expected seconds (a number >= 0) or None (never), got %r" % (seconds,))
    return _engine.set_stall_warning(seconds)


def describe(queue, waited: float) -> str:
    """The warning's text for ``queue`` whose dequeue has waited ``waited`` seconds."""
    stats = queue._ring.stats()
    producers = len(getattr(queue, "_feeders", ()))
    return (
        "Queue %r: a dequeue has waited %.1f s for an element; %d producer%s attached; the ring holds %d of %d "
        "element(s) and is %s (%d put, %d taken so far). Start a Feeder or put elements, or give the queue a "
        "timeout to fail instead of waiting."
        % (
            queue.name,
            waited,
            producers,
            "" if producers == 1 else "s",
            stats["size"],
            stats["capacity"],
            stats["state"],
            stats["enqueued"],
            stats["dequeued"],
        )
    )


def watch(queue) -> None:
    """Have ``queue``'s ring report its stalled dequeues (the queue is held weakly: the ring does not keep it)."""
    ref = weakref.ref(queue)

    def on_stall(waited: float) -> None:
        alive = ref()
        if alive is not None:
            logger.warning(describe(alive, waited))

    queue._ring.on_stall = on_stall


set_stall_warning(DEFAULT_STALL_WARNING_S)
