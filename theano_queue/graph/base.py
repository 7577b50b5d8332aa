"""The graph side of a queue, behind one small interface each graph library implements.

A :class:`~theano_queue.Queue` is the engine's ring plus a *graph front end*:
what makes the library's dequeue and enqueue nodes, and the tensor functions
the variable-length layout reshapes and masks with.  Theano's front end is
``theano_queue.graph.theano.THEANO``, PyTensor's ``theano_queue.graph.pytensor.PYTENSOR``.
This module imports no graph library: the core (the ring, the feeding side,
monitor, trace) runs under either.
"""

import itertools
import threading
import weakref
from typing import Any, ClassVar, Dict


class GraphFrontEnd:
    """What a Queue asks of a graph library.

    ``tensor`` is the library's tensor module (``as_tensor_variable``,
    ``reshape``, ``switch``, ``alloc``, ...) and ``Assert`` its assertion Op
    class, ``Assert(message)(value, *conditions)``: the variable-length
    layout builds its reshapes, masks and checks from them.
    """

    name: ClassVar[str]  # the library, for messages
    tensor: ClassVar[Any]
    Assert: ClassVar[Any]

    def dequeue(self, queue, sequence):
        """The engine's output variables of a new node that takes one element of ``queue``.

        ``sequence`` numbers the queue's nodes in the order they were made:
        a function runs them in that order, and never merges two of them.
        """
        raise NotImplementedError

    def enqueue(self, queue, sequence, inputs):
        """The int64 size variable of a new node that puts ``inputs`` (one per engine component)."""
        raise NotImplementedError


def enqueue_inputs(op, components, values, as_tensor_variable):
    """An Enqueue node's values as tensor variables (``as_tensor_variable`` is the graph library's), one per
    component, of its dtype and rank: ValueError or TypeError naming the Op and the component otherwise."""
    if len(values) != len(components):
        raise ValueError(
            "%s: expected %d components (%s), got %d"
            % (op, len(components), ", ".join(c.name for c in components), len(values))
        )
    checked = []
    for component, value in zip(components, values):
        value = as_tensor_variable(value)
        if value.dtype != component.dtype or value.ndim != len(component.shape):
            raise TypeError(
                "%s, component %r: expected a %d-d %s variable, got %d-d %s (%s)"
                % (op, component.name, len(component.shape), component.dtype, value.ndim, value.dtype, value)
            )
        checked.append(value)
    return checked


def unpicklable_message(queue_name, also=""):
    return (
        "queue '%s' cannot be pickled%s: its elements live in this process's memory (and the GPU's); "
        "make the queue and compile its functions in the process that uses them" % (queue_name, also)
    )


# ---- rings by key ---------------------------------------------------------------------
# A graph whose inputs must be plain arrays (PyTensor's Numba and JAX backends
# pass shared variables as arguments to one compiled function) names its queue
# by an int64 key; the Op looks the ring up here when it runs.

_rings: Dict[int, "weakref.ref[Any]"] = {}
_keys = itertools.count(1)
_lock = threading.Lock()


def register(ring):
    """A new int64 key for ``ring``; the registry holds it weakly (the Queue owns the ring)."""
    with _lock:
        key = next(_keys)
        _rings[key] = weakref.ref(ring, lambda _, key=key: _rings.pop(key, None))
    return key


def lookup(key, who):
    """The ring registered under ``key``, or a QueueError naming ``who`` when its queue is gone."""
    ref = _rings.get(int(key))
    ring = ref() if ref is not None else None
    if ring is None:
        from ..core.errors import QueueError

        raise QueueError(
            "%s: its queue was deleted while a compiled function still uses it (or the function was "
            "unpickled in another process); keep the Queue alive as long as the functions that dequeue "
            "from it or enqueue into it, in the process that made it" % who
        )
    return ring
