"""theano_queue: graph-level queues for Theano.

A :class:`Queue` holds a ring of batches (on the GPU when Theano runs on one);
a :class:`Feeder` fills it in the background; ``q.dequeue()`` gives symbolic
variables that a compiled ``theano.function`` takes the next batch into.

One folder a layer, each ``__init__.py`` listing its files: ``core/`` (the
queue, its components and schema, no graph library), ``graph/`` (the Ops:
a shared base, Theano's and PyTensor's front ends), ``feed/`` (the Feeder
and its sources), ``tools/`` (the command, probe, monitor, trace, stall
warnings, demo), ``clients/`` (Keras, PyMC), ``pytensor/`` (``import
theano_queue.pytensor as tq``).  Beside them: ``__main__.py`` (``python -m
theano_queue``), ``_engine.pyi`` (the C engine's types) and old module paths
user code imports: ``keras.py``, ``ops.py``, ``feeder.py``, ``workers.py``,
``sampler.py``.
"""

from .core import errors  # noqa: F401  (tq.errors.SeveralDequeuesWarning: the guides' path)
from .core.errors import CudaError, FeederError, QueueClosed, QueueError, QueueTimeout
from .core.layout import Padded
from .core.queue import Queue
from .core.spec import Component, own, upto
from .feed import Feeder, worker_info
from .tools.monitor import Monitor, monitor
from .tools.stall import set_stall_warning
from .tools.trace import Trace

__version__ = "0.1.0"
__all__ = [
    "Queue",
    "Feeder",
    "Component",
    "upto",
    "own",
    "Padded",
    "worker_info",
    "monitor",
    "Monitor",
    "Trace",
    "QueueError",
    "QueueClosed",
    "QueueTimeout",
    "FeederError",
    "CudaError",
    "set_stall_warning",
]
