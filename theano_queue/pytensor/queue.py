"""Queue for PyTensor: the engine's ring with PyTensor's graph front end."""

from ..core import queue as _queue
from ..graph.base import register


class Queue(_queue.Queue):
    __doc__ = (
        (_queue.Queue.__doc__ or "").replace("Theano graphs", "PyTensor graphs")
        + """
    Under PyTensor the ring lives in host memory (``target`` None or
    ``"cpu"``): PyTensor has no GPU array backend of its own.  Functions
    that dequeue run on the C linker (``mode="FAST_RUN"`` with
    ``linker="cvm"``, or ``pytensor.config.linker``) and on Numba, the
    default.
    """
    )

    def __init__(self, components, capacity=2, target=None, **options):
        if options.get("name") is None:
            # Named here, as theano_queue.Queue would, so that this message names it too.
            options["name"] = _queue.default_queue_name()
        if target not in (None, "cpu"):
            raise ValueError(
                "Queue %r: target %r; a PyTensor queue lives in host memory (target None or 'cpu'): PyTensor "
                "has no GPU arrays" % (options["name"], target)
            )
        # The options (timeout, name, pad_value, ...) mean what they mean for theano_queue.Queue.
        super().__init__(components, capacity, "cpu", **options)
        # PyTensor's tokens name the ring by this key (theano_queue.graph.base's registry).
        self._key = register(self._ring)

    @staticmethod
    def _graph():
        from ..graph.pytensor import PYTENSOR

        return PYTENSOR
