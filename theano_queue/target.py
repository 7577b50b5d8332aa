"""Where a queue's ring lives: host memory ("cpu") or a Theano GPU context."""
from . import _engine

CPU = "cpu"


def theano_gpu_contexts():
    """Names of the GPU contexts Theano has initialised (None is the default one)."""
    try:
        from theano.gpuarray import pygpu_activated
        from theano.gpuarray.type import list_contexts
    except ImportError:
        return []
    return list(list_contexts()) if pygpu_activated else []


def resolve(target, queue_name):
    """The target a queue asked for, checked: "cpu" or a GPU context name."""
    if target == CPU:
        return CPU
    contexts = theano_gpu_contexts()
    if target is None:
        return (None if None in contexts else contexts[0]) if contexts else CPU
    if target in contexts:
        return target
    raise ValueError(
        "Queue %r: target %r is neither 'cpu' nor a Theano GPU context (initialised contexts: %s); "
        "select GPUs with THEANO_FLAGS=device=cuda0 or contexts=name->cuda0"
        % (queue_name, target, ", ".join(map(repr, contexts)) or "none")
    )


def make_ring(target, name, components, capacity, timeout):
    """The engine ring for a resolved target."""
    spec = [(c.name, c.dtype, c.shape) for c in components]
    if target == CPU:
        return _engine.Ring(name, spec, capacity, timeout)
    from .gpu import make_gpu_ring

    return make_gpu_ring(target, name, spec, capacity, timeout)
