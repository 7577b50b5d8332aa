"""theano_queue: graph-level queues for Theano.

A :class:`Queue` holds a ring of batches (on the GPU when Theano runs on one);
a :class:`Feeder` fills it in the background; ``q.dequeue()`` gives symbolic
variables that a compiled ``theano.function`` takes the next batch into.
"""

from .errors import CudaError, FeederError, QueueClosed, QueueError, QueueTimeout
from .feed import Feeder, worker_info
from .layout import Padded
from .monitor import Monitor, monitor
from .queue import Queue
from .spec import Component, own, upto
from .stall import set_stall_warning
from .trace import Trace

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
