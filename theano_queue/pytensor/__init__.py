"""theano_queue for PyTensor: ``import theano_queue.pytensor as tq``.

The same queue as :mod:`theano_queue` (one engine, one feeding side) whose
:meth:`Queue.dequeue` and :meth:`Queue.enqueue` give PyTensor variables,
under PyTensor's C linker and under Numba (PyTensor 3.0's default linker;
2.38's, PyMC 5.28's pin, is the C linker).  Numba is optional where the
installed PyTensor does not require it.  Nothing here imports Theano.
"""

try:
    import pytensor  # noqa: F401
except ImportError as exc:
    raise ImportError(
        "theano_queue.pytensor needs PyTensor (2.38.x, as PyMC 5.28 pins it, or 3.0.x): "
        "pip install 'theano_queue[pytensor]'; with Theano 1.0.5 use theano_queue.Queue"
    ) from exc

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
    own,
    upto,
    worker_info,
)
from ..clients.pymc import StopWhenDrained, check_model, swap
from .queue import Queue

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
    "swap",
    "check_model",
    "StopWhenDrained",
]
