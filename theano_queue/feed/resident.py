"""Array datasets held in device memory: ``Feeder(q, arrays, device=True)`` copies them to the GPU once and
gathers each batch there.

Sampling, sharding, resume and statistics are an array dataset's: the
Sampler, its cursor, and :class:`~.arrays.ArrayProducer`'s state, counters
and runs of consecutive batches.  Only the gather moves.  Per run of
batches the row numbers go to the device (8 bytes a row), one gather kernel
per component (pygpu's ``take1``) copies the rows device to device, and
each batch goes into the queue through the
device-array put (:meth:`~theano_queue.Queue.put`'s door for device arrays:
the engine copies it into the slot on its copy stream, after the gather, and
checks its dtype and shape as for any device put).  Nothing crosses the bus
per batch but the row numbers.

The arrays pass the feeding side's door (:mod:`.check`) twice: whole, when
the Feeder is made (:func:`~.sources.array_sources`), and in pieces, as they
are cast and uploaded (:func:`~.check.device_rows`).  Whether they fit is
decided before any byte is uploaded (:func:`check_fits`).

Nothing here imports theano or pygpu at import: :class:`DeviceArrays` does,
when a Feeder is made.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import time
from typing import Sequence

import numpy as np

from .. import _engine
from ..errors import Stopped
from .arrays import ArrayProducer
from .check import device_rows

logger = logging.getLogger("theano_queue")

#: Bytes of rows gathered by one kernel at most: a run of small batches is gathered at once (one index upload
#: and one kernel per component for the run), a large batch alone.  Bounds the device memory in flight.
GATHER_BYTES = 64 << 20
#: Bytes of host rows cast and uploaded at a time: bounds the host memory the upload takes beyond the dataset.
UPLOAD_BYTES = 64 << 20


def gib(nbytes: float) -> str:
    return "%.3g GiB" % (nbytes / 2.0**30)


def row_bytes(component) -> int:
    """Bytes of one row (sample) of a component, in the component's dtype."""
    return int(np.prod(component.shape[1:], dtype=np.int64)) * component.dtype.itemsize


def element_bytes(components) -> int:
    """Bytes of one full batch of every component."""
    return sum(component.shape[0] * row_bytes(component) for component in components)


def batches_per_gather(components) -> int:
    """Batches gathered by one kernel: as many as fit GATHER_BYTES (at least one, at most ArrayProducer.RUN)."""
    return max(1, min(ArrayProducer.RUN, GATHER_BYTES // max(1, element_bytes(components))))


def check_fits(where: str, components, arrays: Sequence[np.ndarray], free: int) -> None:
    """A ValueError naming the sizes when the dataset and the batches being gathered exceed ``free`` bytes.

    The dataset takes its rows in the components' dtypes; two runs of
    gathered batches are alive at a time (one being copied into the queue,
    the next being gathered).
    """
    per_component = [len(a) * row_bytes(c) for a, c in zip(arrays, components)]
    in_flight = 2 * batches_per_gather(components) * element_bytes(components)
    need = sum(per_component) + in_flight
    if need > free:
        parts = ", ".join("%s: %s" % (c.name, gib(n)) for c, n in zip(components, per_component))
        raise ValueError(
            "%s: device=True holds the array dataset in device memory, and it does not fit: its %d rows take %s "
            "(%s) and the batches being gathered %s, %s in all; the GPU has %s free.  Leave device=False (the "
            "rows are then gathered on the host), or give fewer rows" % (
                where, len(arrays[0]) if len(arrays) else 0, gib(sum(per_component)), parts, gib(in_flight),
                gib(need), gib(free)))


def free_device_bytes(context_name) -> int:
    """Device memory free to this process in a Theano GPU context: the driver's count, or libgpuarray's largest
    free block where larger (memory of arrays freed in this process, kept by libgpuarray for reuse)."""
    from theano.gpuarray.type import get_context

    context = get_context(context_name)
    try:
        pooled = int(context.largest_memblock)
    except Exception:  # a libgpuarray that cannot say
        pooled = 0
    return max(int(_engine.cuda_mem_info(context.ptr)[0]), pooled)


class DeviceArrays:
    """An array dataset's components uploaded once into a Theano GPU context; batches gathered there by index.

    Each component is held as a 2-d array (rows, elements of a row), so that
    the gather kernel does no index arithmetic per element beyond the row's.
    Every call into libgpuarray from the Feeder's thread runs inside
    :meth:`current`: libgpuarray makes its context current only for the first
    of nested ``cuda_enter`` calls, counted over all threads, so while the
    training loop's thread is inside it (a blocking read of the loss, say)
    ours would run without a context unless it pushed one itself.
    """

    def __init__(self, arrays: Sequence[np.ndarray], components, context_name, queue_name: str,
                 index_rows: int = 0):
        import pygpu
        from theano.gpuarray.type import get_context

        from ..probe import driver, gpu_context_handle

        self.context = get_context(context_name)
        self.driver = driver()
        self.handle = gpu_context_handle(self.context.ptr)
        self.stream = _engine.gpu_context_stream(self.context.ptr)
        self.row_shapes = [tuple(c.shape[1:]) for c in components]
        self.arrays = []
        with self.current():
            for array, component in zip(arrays, components):
                self.arrays.append(self._upload(pygpu, array, component, queue_name))
            # The row numbers of a gather, written by the driver (see gather()); grown when a gather needs more.
            self.index = pygpu.gpuarray.empty((max(1, index_rows),), dtype=np.dtype("int64"), context=self.context)

    def _upload(self, pygpu, array, component, queue_name):
        rows, row = len(array), max(1, int(np.prod(component.shape[1:], dtype=np.int64)))
        on_device = pygpu.gpuarray.empty((rows, row), dtype=component.dtype, context=self.context)
        step = max(1, UPLOAD_BYTES // max(1, row_bytes(component)))
        for first in range(0, rows, step):
            last = min(rows, first + step)
            on_device[first:last].write(device_rows(component, array[first:last], queue_name).reshape(-1, row))
        return on_device

    @contextlib.contextmanager
    def current(self):
        """The queue's CUDA context current in this thread for the block (pushed, and popped after)."""
        self.driver.CtxPushCurrent(ctypes.c_void_p(self.handle))
        try:
            yield
        finally:
            self.driver.unchecked("CtxPopCurrent", ctypes.byref(ctypes.c_void_p()))

    def gather(self, indices: np.ndarray) -> list:
        """Each component's rows ``indices`` (int64, on the host), gathered on the device; call inside current().

        The gather queues behind the training step on the context's stream,
        and libgpuarray waits for it holding the GIL (``take1`` reads its
        error flag back): the stream is waited for first, without the GIL (a
        ctypes call releases it), so that the training loop's thread runs
        meanwhile.  The row numbers go up with the driver's own copy on that
        stream, not with pygpu's, which releases the GIL while inside
        libgpuarray's count: the training loop's thread could then enter
        libgpuarray without its context being made current.
        """
        import pygpu

        indices = np.ascontiguousarray(indices, dtype=np.int64)
        if len(indices) > len(self.index):
            self.index = pygpu.gpuarray.empty((len(indices),), dtype=np.dtype("int64"), context=self.context)
        index = self.index[: len(indices)]
        self.driver.StreamSynchronize(ctypes.c_void_p(self.stream))
        # Pageable memory: the call returns once the driver has staged the bytes; the copy is ordered on the
        # stream before the gather, and after the previous gather that read the same index memory.
        self.driver.MemcpyHtoDAsync(ctypes.c_uint64(index.gpudata), indices.ctypes.data_as(ctypes.c_void_p),
                                    indices.nbytes, ctypes.c_void_p(self.stream))
        return [array.take1(index) for array in self.arrays]

    def batch(self, gathered: list, first: int, last: int) -> tuple:
        """Rows ``first:last`` of a gather, shaped as the components' batches (views, no copy)."""
        return tuple(g[first:last].reshape((last - first,) + shape) for g, shape in zip(gathered, self.row_shapes))

    def release(self) -> None:
        """Gives the device memory back (to libgpuarray's pool, which Theano allocates from)."""
        arrays, index = self.arrays, self.index
        self.arrays, self.index = [], None
        with self.current():
            del arrays, index  # freed while the context is current


def upload_error(where: str, components, arrays, exc: BaseException) -> ValueError:
    """What a failed upload (device memory that ran out after all) says: the sizes, and the cause."""
    total = sum(len(a) * row_bytes(c) for a, c in zip(arrays, components))
    return ValueError("%s: device=True could not upload the array dataset (%s) to the GPU: %s: %s.  Leave "
                      "device=False (the rows are then gathered on the host), or give fewer rows"
                      % (where, gib(total), type(exc).__name__, exc))


class ResidentProducer(ArrayProducer):
    """An array dataset held in device memory (``Feeder(device=True)``): gathered and put there, run by run.

    An :class:`~.arrays.ArrayProducer` (its state, statistics and
    :meth:`~.arrays.ArrayProducer.runs` of consecutive batches) whose
    :meth:`run` gathers on the device.  Made in the caller's thread: refuses
    a queue in host memory and a dataset that does not fit, then uploads it,
    before anything is queued.
    """

    def __init__(self, feeder, queue, arrays, sampler, cursor):
        super().__init__(feeder, queue, arrays, sampler, cursor)
        where = self.where  # "Feeder(<queue>)"
        if not queue.on_gpu:
            raise ValueError("%s: device=True holds the array dataset in GPU memory and gathers it there, but queue "
                             "%r lives in host memory; leave device=False (the engine gathers the rows on the host "
                             "then), or make the queue on a GPU" % (where, queue.name))
        components = queue.components
        #: Batches per gather: its RUN, read by :meth:`runs`.
        self.RUN = batches_per_gather(components)
        check_fits(where, components, arrays, free_device_bytes(queue._target.context_name))
        try:
            self.device = DeviceArrays(arrays, components, queue._target.context_name, queue.name,
                                       index_rows=self.RUN * sampler.batch_size)
        except (TypeError, ValueError):
            raise  # the door's own message, about a value, not about memory
        except Exception as exc:  # pygpu's GpuArrayException (memory that ran out after all), a CudaError
            raise upload_error(where, components, arrays, exc) from exc
        self.gather = "device"

    def run(self, stop) -> bool:
        """Produce until done (True) or stopped (False)."""
        sampler = self.sampler
        size, per_epoch = sampler.batch_size, sampler.batches_per_epoch
        ring = self.queue._ring
        for position, count in self.runs():
            epoch, first = divmod(position, per_epoch)
            indices = sampler.epoch_indices(epoch)[first * size : (first + count) * size]
            began, waited = time.perf_counter(), ring.stats()["producer_wait_s"]
            with self.device.current():  # the gathered batches are freed inside it too
                if not self.put_run(self.device.gather(indices), position, count, len(indices), stop):
                    return False
            self.busy += time.perf_counter() - began - (ring.stats()["producer_wait_s"] - waited)
        return True

    def put_run(self, gathered, position, count, rows, stop) -> bool:
        """Puts the ``count`` batches of one gather (``rows`` rows in all); False when stopped."""
        size = self.sampler.batch_size
        for k in range(count):
            first, last = k * size, min((k + 1) * size, rows)
            with self.progress.lock:  # before the put: consumers may take it at once
                self.progress.log.append(position + k)
            try:
                self.queue.put(self.device.batch(gathered, first, last), math.inf, stop)
            except Stopped:
                return False
            self.samples += last - first
            self.feeder.produced += 1
        return True

    def shutdown(self) -> None:
        """Gives the device copy back; never raises (the Feeder's thread still has to close the queue)."""
        super().shutdown()
        device, self.device = getattr(self, "device", None), None
        if device is None:
            return
        try:
            device.release()
        except Exception as exc:  # a CudaError: the memory goes back when the arrays are collected instead
            logger.warning("Feeder(%s): giving the device copy of the dataset back failed: %s", self.queue.name, exc)
