"""Array datasets held in device memory: ``Feeder(q, arrays, device=True)`` copies them to the GPU once and
gathers each batch there.

Sampling, sharding, resume, statistics and the runs of batches are an
array dataset's (:class:`~.arrays.ArrayProducer`); only the gather moves.
When the Feeder starts, the engine copies each array's bytes into device
memory of the queue's CUDA context (``Ring.gather_on_device(arrays,
"device")``); from then on each batch costs its row numbers (8 bytes a row)
and one kernel for up to eight components, with the GIL released and no
Python per batch.  ``Ring.put_rows`` stages a small batch's row numbers and leaves the
gather to the dequeue, which runs it on the step's own stream straight into
the memory the graph reads; a batch of more than 2 MiB it gathers into the
slot itself, on the queue's copy stream, beside the step (doc/design.rst,
"Datasets held in GPU memory").  The device copy is freed when the run ends.

The engine runs the kernel in its own context push, in the Feeder's
thread, without libgpuarray: libgpuarray 0.7.6 counts its context entries
per context, not per thread, so a gather through pygpu in the Feeder's
thread could leave the training thread's Ops without a current context.
"""

from __future__ import annotations

import numpy as np

from ..core import schema
from ..core.errors import QueueError
from ..core.target import gib
from .arrays import HELD, ArrayProducer


def held_form(array: np.ndarray, component, queue_name: str = "") -> np.ndarray:
    """The array as the device will hold it: the array itself when its bytes are its rows, in the component's
    dtype (C-contiguous, or one row repeated with stride 0), else a C-contiguous copy, safely cast.

    The engine copies the bytes an array spans; a view that skips rows, a
    Fortran-order array or another dtype is made compact on the host first
    (one copy, kept while the Feeder runs: the engine finds its rows by their
    host addresses).
    """
    if array.dtype == component.dtype and (array.flags.c_contiguous or (array.ndim and array.strides[0] == 0)):
        if array.ndim < 2 or array[:1].flags.c_contiguous:
            return array
    return np.ascontiguousarray(schema.cast(component, array, queue_name))  # the cast is the schema's


def held_bytes(array: np.ndarray) -> int:
    """Bytes of device memory holding ``array``: the bytes it spans."""
    if not array.size:
        return 0
    stride = abs(array.strides[0]) if array.ndim else 0
    return (len(array) - 1) * stride + (array[0].nbytes if array.ndim else array.nbytes)


class HeldArrayProducer(ArrayProducer):
    """An array dataset held in device memory (``Feeder(device=True)``), each batch gathered there by the GPU.

    Made in the caller's thread (a CPU queue is refused there); the arrays
    are copied to the device by :meth:`start`, in the caller's thread too, so
    that a dataset that does not fit is refused where the Feeder starts,
    naming the sizes, with nothing queued and nothing held.
    """

    def __init__(self, feeder, port, arrays, sampler, cursor):
        where = "Feeder(%s)" % port.name
        if not port.target.on_gpu:
            raise ValueError(
                "%s: device=True holds the array dataset in GPU memory, and queue %r is in host memory: leave "
                "device=False (the host gathers its rows natively)" % (where, port.name)
            )
        held = [held_form(a, c, port.name) for a, c in zip(arrays, port.components)]
        super().__init__(feeder, port, held, sampler, cursor)
        self.mechanism = self.gather = HELD
        self.attached = False

    def start(self) -> None:
        """Copies the arrays to the device (seconds for gigabytes), then starts as an array dataset does."""
        try:
            self.upload()
        except (QueueError, MemoryError) as exc:  # CudaError is a QueueError
            raise self.refusal(exc) from exc
        self.attached = True
        super().start()

    def upload(self) -> None:
        """The engine copies the arrays into device memory (it refuses, with the sizes, what does not fit)."""
        self.port.ring.gather_on_device(self.arrays, HELD)

    def refusal(self, exc: BaseException) -> ValueError:
        sizes = [held_bytes(a) for a in self.arrays]
        parts = ", ".join("%s: %s" % (c.name, gib(n)) for c, n in zip(self.port.components, sizes))
        return ValueError(
            "%s: device=True holds the array dataset in GPU memory (%s in all; %s), and the engine could not: %s.  "
            "Leave device=False (the rows are then gathered on the host), or give fewer rows"
            % (self.where, gib(sum(sizes)), parts, exc)
        )

    def gather_on_device(self) -> str:
        return HELD  # attached by start()

    def gather_on_host(self) -> None:
        """Frees the device copy, once the gathers in flight are done."""
        if self.attached:
            self.attached = False
            self.port.ring.gather_on_host()

    def shutdown(self) -> None:
        super().shutdown()
        self.gather_on_host()  # run() did, unless it never ran
