"""Where a queue's ring lives: host memory ("cpu") or a Theano GPU context."""

import os
from typing import Any, List, NamedTuple, Optional, Sequence

import numpy as np

from .. import _engine
from .spec import Component

CPU = "cpu"


class Target(NamedTuple):
    """A resolved target: ``label`` is "cpu", "gpu" (Theano's default context) or a context name."""

    label: str
    on_gpu: bool
    context_name: Optional[str] = None  # Theano's name for the GPU context; None is the default one


def theano_gpu_contexts() -> List[Optional[str]]:
    """Names of the GPU contexts Theano has initialised (None is the default one)."""
    try:
        from theano.gpuarray import pygpu_activated
        from theano.gpuarray.type import list_contexts
    except ImportError:
        return []
    return list(list_contexts()) if pygpu_activated else []


def resolve(target: Optional[str], queue_name: str) -> Target:
    """The target a queue asked for, checked."""
    if target == CPU:
        return Target(CPU, False)
    contexts = theano_gpu_contexts()
    if target is None:
        if not contexts:
            return Target(CPU, False)
        name = None if None in contexts else contexts[0]
        return Target("gpu" if name is None else name, True, name)
    if target in contexts:
        return Target(target, True, target)
    raise ValueError(
        "Queue %r: target %r is neither 'cpu' nor a Theano GPU context (initialised contexts: %s); "
        "select GPUs with THEANO_FLAGS=device=cuda0 or contexts=name->cuda0"
        % (queue_name, target, ", ".join(map(repr, contexts)) or "none")
    )


def check_capacity(capacity: Any, queue_name: str) -> int:
    """The capacity as an int the engine takes, or a ValueError naming the argument."""
    if (
        isinstance(capacity, bool)
        or not isinstance(capacity, (int, np.integer))
        or not (1 <= capacity <= _engine.MAX_CAPACITY)
    ):
        raise ValueError(
            'Queue %r: capacity must be an int from 1 to %d or "auto", got %r'
            % (queue_name, _engine.MAX_CAPACITY, capacity)
        )
    return int(capacity)


# The engine lays each component out on this boundary within a slot (c_code/engine/core/tq_ring.h).
SLOT_ALIGN = _engine.SLOT_ALIGN


def ring_bytes(components: Sequence[Component], capacity: int) -> int:
    """Bytes of memory the ring's slots take: capacity x one slot, laid out by the engine itself."""
    return capacity * _engine.slot_bytes([(c.name, c.dtype, c.shape) for c in components])


def auto_slots(target: Target, components: Sequence[Component], budget: Any, name: str) -> int:
    """The slots of a ``capacity="auto"`` ring: what ``budget`` bytes (None: the default) hold, the GPU's free
    memory part of the budget on a GPU target (theano_queue/feed/tune_capacity.py)."""
    from ..feed.tune_capacity import auto_slots as fit

    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1):
        raise ValueError("Queue %r: memory_budget must be a number of bytes >= 1, got %r" % (name, budget))
    device_free = gpu_free_bytes(target) if target.on_gpu else None
    return fit(ring_bytes(components, 1), host_memory_bytes(), None if budget is None else int(budget), device_free)[0]


def host_memory_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(target: Target, name: str, components: Sequence[Component], capacity: int) -> None:
    """A ValueError before anything is allocated when the ring cannot fit its memory.

    A host ring lives in host memory; a GPU ring has device slots and as
    much pinned host staging.  Allocation would fail (or, with overcommit,
    crash the process later), so the queue says so at construction.
    """
    need = ring_bytes(components, capacity)
    largest = max(components, key=lambda c: c.nbytes)
    places = [("host", host_memory_bytes(), "this machine has")]
    if target.on_gpu:
        places.append(("device", gpu_free_bytes(target), "the GPU has free"))
    for place, have, phrase in places:
        if need > have:
            raise ValueError(
                "Queue %r: %d slots of %s each (largest component %r: %s) need %s of %s memory; %s %s"
                % (
                    name,
                    capacity,
                    gib(need // capacity),
                    largest.name,
                    gib(largest.nbytes),
                    gib(need),
                    place,
                    phrase,
                    gib(have),
                )
            )


def gib(nbytes: float) -> str:
    return "%.3g GiB" % (nbytes / 2.0**30)


def gpu_free_bytes(target: Target) -> int:
    from theano.gpuarray.type import get_context

    return _engine.cuda_mem_info(get_context(target.context_name).ptr)[0]


def make_ring(
    target: Target, name: str, components: Sequence[Component], capacity: int, timeout: Optional[float]
) -> _engine.Ring:
    """The engine ring for a resolved target."""
    check_fits(target, name, components, capacity)
    spec = [(c.name, c.dtype, c.shape) for c in components]
    if not target.on_gpu:
        return _engine.Ring(name, spec, capacity, timeout)
    from theano.gpuarray.type import get_context

    from ..graph import theano_gpu as gpu  # noqa: F401  (registers the Ops that lift dequeues to the GPU)

    return _engine.Ring(name, spec, capacity, timeout, gpu_context=get_context(target.context_name).ptr)
