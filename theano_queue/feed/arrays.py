"""Array datasets: a tuple or dict of arrays (``np.memmap`` included), one per component, gathered into slots.

Rows that are C-contiguous and of the component's dtype are gathered by the
engine (``Ring.put_rows``: native threads, no GIL, no Python per batch; on
a GPU queue the GPU may copy large rows itself).  Anything else (rows that
are not contiguous, such as a Fortran-order array or memmap, or a dtype
that casts safely to the component's) is gathered batch by batch by numpy
in the Feeder's thread, reading only the batch's rows with their strides:
never a copy of the whole array.
"""

from __future__ import annotations

import logging
import math
import os
import time

import numpy as np

from ..errors import QueueError, Stopped
from .producers import InlineMapProducer
from .sources import rows_contiguous

logger = logging.getLogger("theano_queue")

#: For benchmarks only: who gathers an array dataset's rows on a GPU queue.
#: "auto" (the default when unset) lets the engine choose per component (the
#: GPU's batch copy for rows of 256 KiB or more, the host for the rest);
#: "batch" and "host" force one for every component, so that
#: bench/arrays_bench.py can compare them in one run.  Not an interface for
#: users: the default is the measured choice.
GATHER_ENV = "THEANO_QUEUE_GATHER"
GATHER_MECHANISMS = ("auto", "batch", "host")


def requested_gather(where: str) -> str:
    """The gather mechanism THEANO_QUEUE_GATHER asks for ("auto" when unset), checked."""
    value = os.environ.get(GATHER_ENV) or "auto"
    if value not in GATHER_MECHANISMS:
        raise ValueError("%s: %s must be one of %s, got %r" % (where, GATHER_ENV, ", ".join(GATHER_MECHANISMS), value))
    return value


def native(arrays, components) -> bool:
    """True when the engine can gather every component: contiguous rows of the component's own dtype."""
    return all(a.dtype == c.dtype and rows_contiguous(a) for a, c in zip(arrays, components))


class ArrayProducer(InlineMapProducer):
    """An array dataset fed by native gathers: one engine call per run of batches, no Python per batch.

    The sampler gives each epoch's index array; ``Ring.put_rows`` gathers the
    rows of every batch of a run straight into the slots' staging (without the
    GIL, on the copy pool's threads) and publishes them.
    """

    #: Batches per engine call at most: bounds how stale ``produced`` is between calls.
    RUN = 256

    def __init__(self, feeder, queue, arrays, sampler, cursor):
        super().__init__(feeder, queue, None, sampler, cursor)  # its state, stats and start; not its writer
        self.arrays = arrays
        self.where = "Feeder(%s)" % queue.name
        self.mechanism = requested_gather(self.where)
        self.native = native(arrays, queue.components)
        #: Who gathers the rows while it runs: "host", "numpy" (strided or cast rows), or "batch" when the
        #: GPU copies some component's.
        self.gather = "host" if self.native else "numpy"

    def gather_on_device(self) -> str:
        """Let the GPU copy the rows itself where that pays: the mechanism used ("host" where it does not).

        The engine chooses per component (the GPU for large rows); the arrays
        it chose are page-locked and mapped for it until :meth:`run` ends.
        Where that is refused (a driver without cuMemcpyBatchAsync, a dataset
        too large to page-lock, memory that cannot be), one log line says so
        and why, and the rows are gathered on the host.
        """
        if not self.queue._target.on_gpu or self.mechanism == "host":
            return "host"
        try:
            return self.queue._ring.gather_on_device(self.arrays, self.mechanism)
        except (QueueError, MemoryError) as exc:  # CudaError is a QueueError
            logger.warning("%s: the rows are gathered on the host, not by the GPU: %s", self.where, exc)
            return "host"

    def stats(self) -> dict:
        stats = super().stats()
        stats["gather"] = self.gather
        return stats

    def runs(self):
        """(first position, count) of the batches to put, in order: consecutive, within one epoch each."""
        sampler, cursor = self.sampler, self.start_cursor
        per_epoch, skip = sampler.batches_per_epoch, sorted(cursor.above)
        position = cursor.low
        while per_epoch and (sampler.total is None or position < sampler.total):
            while skip and skip[0] < position:
                skip.pop(0)
            if skip and skip[0] == position:
                position += 1
                continue
            end = (position // per_epoch + 1) * per_epoch
            end = min(end, position + self.RUN, *(skip[:1] or [end]), *([sampler.total] if sampler.total else []))
            yield position, end - position
            position = end

    def run(self, stop) -> bool:
        """Produce until done (True) or stopped (False)."""
        if not self.native:
            return self.put_gathered(stop)
        self.gather = self.gather_on_device()
        try:
            return self.put_runs(stop)
        finally:
            if self.gather != "host":
                self.gather_on_host()

    def gather_on_host(self) -> None:
        """Undoes :meth:`gather_on_device`: waits for the gathers in flight, unpins."""
        self.queue._ring.gather_on_host()

    def put_runs(self, stop) -> bool:
        sampler, ring = self.sampler, self.queue._ring
        per_epoch = sampler.batches_per_epoch
        for position, count in self.runs():
            epoch, first = divmod(position, per_epoch)
            indices = sampler.epoch_indices(epoch)
            with self.progress.lock:  # before the puts: consumers may take them at once
                self.progress.log.extend(range(position, position + count))
            began, waited = time.perf_counter(), ring.stats()["producer_wait_s"]
            put = ring.put_rows(self.arrays, indices, sampler.batch_size, first, count, stop)
            self.busy += time.perf_counter() - began - (ring.stats()["producer_wait_s"] - waited)
            self.samples += int(min(len(indices), (first + put) * sampler.batch_size) - first * sampler.batch_size)
            self.feeder.produced += put
            if put < count:
                return False
        return True

    def put_gathered(self, stop) -> bool:
        """Each batch's rows read by numpy with their strides (and cast) straight into the slot."""
        for position in self.sampler.pending(self.start_cursor):
            indices = self.sampler.batch(position)
            try:
                with self.queue.writer(math.inf, stop) as slot:
                    began = time.perf_counter()
                    for array, view in zip(self.arrays, slot.arrays):
                        rows = view[: len(indices)]
                        if array.dtype == rows.dtype:
                            np.take(array, indices, axis=0, out=rows)
                        else:
                            rows[...] = array[indices]  # a safe cast (checked when the Feeder was made)
                    slot.rows = len(indices)
                    self.busy += time.perf_counter() - began
                    with self.progress.lock:  # before the commit: consumers may take it at once
                        self.progress.log.append(position)
            except Stopped:
                return False
            self.samples += len(indices)
            self.feeder.produced += 1
        return True
