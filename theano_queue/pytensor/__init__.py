"""theano_queue for PyTensor: ``import theano_queue.pytensor as tq``.

The same queue as :mod:`theano_queue` (one engine, one feeding side) whose
:meth:`Queue.dequeue` and :meth:`Queue.enqueue` give PyTensor variables,
under PyTensor's C linker and under Numba (its default).  Nothing here
imports Theano.
"""

from .. import (
    Component,
    CudaError,
    Feeder,
    FeederError,
    Monitor,
    Padded,
    QueueClosed,
    QueueError,
    QueueTimeout,
    Trace,
    monitor,
    upto,
    worker_info,
)
from .queue import Queue

__all__ = [
    "Queue",
    "Feeder",
    "Component",
    "upto",
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
]
