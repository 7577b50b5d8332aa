"""Where a queue's ring lives: host memory ("cpu") or a Theano GPU context."""
from typing import NamedTuple, Optional

from . import _engine

CPU = "cpu"


class Target(NamedTuple):
    """A resolved target: ``label`` is "cpu", "gpu" (Theano's default context) or a context name."""

    label: str
    on_gpu: bool
    context_name: Optional[str] = None  # Theano's name for the GPU context; None is the default one


def theano_gpu_contexts():
    """Names of the GPU contexts Theano has initialised (None is the default one)."""
    try:
        from theano.gpuarray import pygpu_activated
        from theano.gpuarray.type import list_contexts
    except ImportError:
        return []
    return list(list_contexts()) if pygpu_activated else []


def resolve(target, queue_name):
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


def make_ring(target, name, components, capacity, timeout):
    """The engine ring for a resolved target."""
    spec = [(c.name, c.dtype, c.shape) for c in components]
    if not target.on_gpu:
        return _engine.Ring(name, spec, capacity, timeout)
    from theano.gpuarray.type import get_context

    from . import gpu  # noqa: F401  (registers the Ops that lift dequeues to the GPU)

    return _engine.Ring(name, spec, capacity, timeout, gpu_context=get_context(target.context_name).ptr)
