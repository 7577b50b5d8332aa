"""A dequeue, or a put, that waits long says so.

With ``timeout=None`` a dequeue waits as long as it takes, and a training
function called with no producer running would wait in silence.  Once a
dequeue has waited :func:`set_stall_warning`'s time (30 s unless set), one
warning goes to the ``theano_queue`` logger per wait, naming the queue, the
Feeders attached to it and what each is doing (its workers starting, how
many are ready, its last element), and what its ring holds.  A ``q.put``
that waits as long for a free slot warns the same way (a Feeder's own puts
do not: waiting for the model is their normal state).  The engine decides
when (``c_code/python/tq_py_element.c``, the one wait loop); this module says what.
Imports no Theano.
"""

import logging
import numbers
import weakref
from typing import Optional

from .. import _engine

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


def describe(queue, waited: float, waiting: str = "a dequeue") -> str:
    """The warning's text for ``queue`` where ``waiting`` (a dequeue, or a put) has waited ``waited`` seconds."""
    stats = queue.stats()
    members = queue.port.run.attached()
    producers = len(members)
    doing = ["; %s: %s" % (m.name, m.activity()) for m in members]
    if waiting != "a dequeue":
        advice = "Take elements (is the training loop running?), or give the put a timeout to fail instead."
    elif producers:
        advice = "Give the queue a timeout to fail instead of waiting."
    else:
        advice = "Start a Feeder or put elements, or give the queue a timeout to fail instead of waiting."
    return (
        "Queue %r: %s has waited %.1f s for %s; %d producer%s attached%s; the ring holds %d of %d "
        "element(s) and is %s (%d put, %d taken so far). %s"
        % (
            queue.name,
            waiting,
            waited,
            "an element" if waiting == "a dequeue" else "a free slot",
            producers,
            "" if producers == 1 else "s",
            "".join(doing),
            stats["size"],
            stats["capacity"],
            stats["state"],
            stats["enqueued"],
            stats["dequeued"],
            advice,
        )
    )


def watch(queue, ring) -> None:
    """Have ``queue``'s ``ring`` report its stalled dequeues (the queue is held weakly: the ring does not keep it)."""
    ref = weakref.ref(queue)

    def on_stall(waited: float, put: bool = False) -> None:
        alive = ref()
        if alive is not None:
            logger.warning(describe(alive, waited, "a put" if put else "a dequeue"))

    ring.on_stall = on_stall


set_stall_warning(DEFAULT_STALL_WARNING_S)
