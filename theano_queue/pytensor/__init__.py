"""theano_queue for PyTensor: ``import theano_queue.pytensor as tq``.

The same queue as :mod:`theano_queue` (one engine, one feeding side) whose
:meth:`Queue.dequeue` and :meth:`Queue.enqueue` give PyTensor variables,
under PyTensor's C linker and under Numba (PyTensor 3.0's default linker;
2.38's, PyMC 5.28's pin, is the C linker).  Numba is optional where the
installed PyTensor does not require it.  Nothing here imports Theano.

``queue.py`` is its :class:`Queue`; its Ops are in :mod:`theano_queue.graph.pytensor`,
PyMC's helpers in :mod:`theano_queue.clients.pymc`; ``blas.py`` gives
PyTensor's C linker OpenBLAS where its own probe finds no BLAS.
"""

try:
    import pytensor  # noqa: F401
except ImportError as exc:
    raise ImportError(
        "theano_queue.pytensor needs PyTensor (2.38.x, as PyMC 5.28 pins it, or 3.0.x): "
        "pip install 'theano_queue[pytensor]'; with Theano 1.0.5 use theano_queue.Queue"
    ) from exc

# The same public names as theano_queue's, Queue replaced by PyTensor's, and PyMC's three.
from .. import *  # noqa: F403
from .. import __all__ as _shared_names
from ..clients.pymc import StopWhenDrained, check_model, swap
from .blas import fall_back_to_openblas
from .queue import Queue as Queue  # type: ignore[assignment]  # replaces the Theano one that * brought

fall_back_to_openblas()

__all__ = [*_shared_names, "swap", "check_model", "StopWhenDrained"]
