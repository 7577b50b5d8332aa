"""Array datasets: a tuple or dict of arrays (``np.memmap`` included), one per component, gathered into slots.

The engine gathers every component it can read (``Ring.put_rows``: native
threads, no GIL, no Python per batch): rows of the component's dtype or of
one the queue's schema casts safely into it (uint8 labels into int32,
float16 into float32: cast in the gather's loop), laid out anyhow (strided
views, Fortran-order arrays and memmaps, reversed or 0-stride rows are
walked element by element, reading only the batch's rows).  On a GPU queue
the GPU may copy large rows itself when every component's rows are plain
bytes.  Only a dataset with a component the engine cannot read (a dtype it
has no loop for, such as complex, or rows of more than 16 axes) is gathered
batch by batch by numpy in the Feeder's thread, reading only the batch's
rows: never a copy of the whole array.

``stats()["gather"]`` names the mechanism per component, a dict keyed by
component name: ``"host"`` (the engine's copy pool), ``"batch"`` (the GPU's
batch copy), ``"device"`` (held in device memory) or ``"numpy"``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, List, Optional, Tuple, Union

import numpy as np

from .. import _engine
from ..core.errors import QueueError, Stopped
from .producers import InProcessProducer, sampled_stats
from .state import Schedule

logger = logging.getLogger("theano_queue")

#: The gather's mechanisms, as the engine spells them (tq_gather_mechanism's order, c_code/engine/core/tq_gather.h):
#: its copy pool, the GPU's batch copy, the engine's choice per component, and a held dataset's device gather.
HOST, BATCH, AUTO, HELD = _engine.GATHER_MECHANISMS

#: For benchmarks only: who gathers an array dataset's rows on a GPU queue.
#: "auto" (the default when unset) lets the engine choose per component (the
#: GPU's batch copy for rows of DEVICE_MIN_ROW_BYTES or more, the host for
#: the rest); "batch" and "host" force one for every component, so that
#: bench/arrays_bench.py can compare them in one run.  Not an interface for
#: users: the default is the measured choice.
GATHER_ENV = "THEANO_QUEUE_GATHER"
GATHER_MECHANISMS = (AUTO, BATCH, HOST)


def requested_gather(where: str) -> str:
    """The gather mechanism THEANO_QUEUE_GATHER asks for ("auto" when unset), checked."""
    value = os.environ.get(GATHER_ENV) or AUTO
    if value not in GATHER_MECHANISMS:
        raise ValueError("%s: %s must be one of %s, got %r" % (where, GATHER_ENV, ", ".join(GATHER_MECHANISMS), value))
    return value


#: Rows this large or larger are the GPU's to copy under "auto" (the engine's TQ_GATHER_DEVICE_MIN_ROW,
#: c_code/engine/core/tq_gather.h): used only to say per component who gathered.
DEVICE_MIN_ROW_BYTES = _engine.GATHER_DEVICE_MIN_ROW


def gather_paths(ring, arrays, components) -> tuple:
    """Per component, how the engine reads its rows: "rows" (as they are), "elements" (walked or cast) or None.

    A dtype other than the component's is the engine's rule to let in (cast on the way); the Feeder checked it.
    """
    return tuple(ring.gather_paths(arrays))


def row_bytes(component) -> int:
    return int(np.dtype(component.dtype).itemsize * math.prod(component.shape[1:]))


class OrderAhead:
    """The coming epoch's order, made in idle time while the epoch before it is written.

    A shuffled epoch's permutation takes milliseconds (2.7 ms for 200 000
    rows, 11 ms for 500 000); computed when the epoch begins, it held the
    Feeder up while the queue's few batches ran out, and the step waited
    for it once an epoch.  The engine makes it on a thread of its own that
    holds no GIL and runs only on an idle core (:meth:`Sampler.permuting`):
    a Python thread for it waited for the GIL that a busy consumer holds,
    and took the core the Feeder was woken for (doc/bench/notes.rst, "The
    next epoch's order, off the GIL").  On a machine with no idle core it
    may not be done in time: the Feeder then makes the order itself, rather
    than wait on a thread that gets no core.
    """

    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self.coming: Optional[Tuple[int, Any]] = None  # (epoch, its _engine.Permutation)
        self.stopping: List[Any] = []  # Permutations told to stop whose thread had not returned yet

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """The sampler's indices of ``epoch`` (made ahead where they were), the next epoch's begun."""
        sampler, coming = self.sampler, self.coming
        if coming is not None and coming[0] == epoch and coming[1].done():
            sampler.keep(epoch, sampler.sharded(coming[1].result()))
        if (coming is None or coming[0] <= epoch) and self.to_come(epoch + 1):
            self.retire()
            self.coming = (epoch + 1, sampler.permuting(epoch + 1))
        return sampler.epoch_indices(epoch)

    def to_come(self, epoch: int) -> bool:
        total = self.sampler.total
        return total is None or epoch * self.sampler.batches_per_epoch < total

    def retire(self) -> None:
        """Ends the permutation in the making without waiting for its thread (ended later where it has not
        returned yet), and those retired before whose thread has returned since."""
        if self.coming is not None:
            self.stopping.append(self.coming[1])
            self.coming = None
        self.stopping = [p for p in self.stopping if not p.close(wait=False)]

    def close(self) -> None:
        """Ends every permutation in the making and its thread (at the run's end)."""
        self.retire()
        for permutation in self.stopping:
            permutation.close()
        self.stopping = []


class ArrayProducer(InProcessProducer):
    """An array dataset fed by native gathers: one engine call per run of batches, no Python per batch.

    The sampler gives each epoch's index array; ``Ring.put_rows`` gathers the
    rows of every batch of a run straight into the slots' staging (without the
    GIL, on the copy pool's threads) and publishes them.
    """

    #: Batches per engine call at most: bounds how stale ``produced`` is between calls.
    RUN = 256
    #: Rows per engine call at most (but one batch): bounds the indices computed at once for an epoch that is
    #: not held (index order, a keyed permutation), 512 KiB of int64.
    RUN_ROWS = 1 << 16

    #: A batch gathered by the Feeder's thread alone (the engine shares larger copies among its copy threads).
    SMALL_BATCH_BYTES = 1 << 20

    @classmethod
    def refill_room(cls, capacity: int, batch_bytes: int) -> int:
        """The free slots a full queue waits for before the next batch: half of them for small batches (1 for 2
        or 3 slots), 1 for large ones.

        A Feeder woken by every dequeue runs once per training step, and on
        a machine with few cores each wake-up takes a core from the step
        (doc/pymc.rst, "Speed, measured"); woken for half the queue, it
        writes that many batches in a row while the other half is there to
        be taken.  A large batch's gather costs more than the wake-up, and
        half a queue of them written in a row holds the cores longer than
        the step can wait (doc/design.rst, "The Feeder's wait for room").
        """
        return max(1, capacity // 2) if batch_bytes < cls.SMALL_BATCH_BYTES else 1

    def __init__(self, feeder, port, arrays, sampler, cursor):
        super().__init__(feeder, port)
        self.schedule = Schedule(sampler, cursor, self.progress)
        self.arrays = arrays
        self.where = "Feeder(%s)" % port.name
        self.mechanism = requested_gather(self.where)
        self.paths = gather_paths(port.ring, arrays, port.components)
        self.native = None not in self.paths
        self.room = self.refill_room(port.ring.capacity, sum(c.nbytes for c in port.components))
        #: Who gathers the rows while it runs: one word for every component, or a list of one per component.
        self.gather: Union[str, List[str]] = HOST if self.native else "numpy"

    def gather_on_device(self) -> str:
        """Let the GPU copy the rows itself where that pays: the mechanism used ("host" where it does not).

        The engine chooses per component (the GPU for large rows); the arrays
        it chose are page-locked and mapped for it until :meth:`run` ends.
        Where that is refused (a driver without cuMemcpyBatchAsync, a dataset
        too large to page-lock, memory that cannot be), one log line says so
        and why, and the rows are gathered on the host.
        """
        if not self.port.target.on_gpu or self.mechanism == HOST:
            return HOST
        if any(path != "rows" for path in self.paths):
            return HOST  # the GPU copies plain bytes only: walked or cast rows are the host's
        try:
            return self.port.ring.gather_on_device(self.arrays, self.mechanism)
        except (QueueError, MemoryError) as exc:  # CudaError is a QueueError
            logger.warning("%s: the rows are gathered on the host, not by the GPU: %s", self.where, exc)
            return HOST

    def per_component(self, used: str) -> list:
        """The words of ``stats()["gather"]`` from the mechanism the engine used ("auto" chooses per component)."""
        if used != BATCH or self.mechanism != AUTO:
            return [used] * len(self.arrays)
        return [BATCH if row_bytes(c) >= DEVICE_MIN_ROW_BYTES else HOST for c in self.port.components]

    def state_dict(self) -> dict:
        return self.schedule.state_dict()

    def stats(self) -> dict:
        stats = sampled_stats(self, super().stats())
        words = [self.gather] * len(self.arrays) if isinstance(self.gather, str) else self.gather
        stats["gather"] = {c.name: word for c, word in zip(self.port.components, words)}
        return stats

    def runs(self):
        """(first position, count) of the batches to put, in order: consecutive, within one epoch each."""
        sampler, cursor = self.schedule.sampler, self.schedule.start_cursor
        per_epoch, skip = sampler.batches_per_epoch, sorted(cursor.above)
        run = self.RUN if sampler.holds_epochs else max(1, min(self.RUN, self.RUN_ROWS // sampler.batch_size))
        position = cursor.low
        while per_epoch and (sampler.total is None or position < sampler.total):
            while skip and skip[0] < position:
                skip.pop(0)
            if skip and skip[0] == position:
                position += 1
                continue
            end = (position // per_epoch + 1) * per_epoch
            end = min(end, position + run, *(skip[:1] or [end]), *([sampler.total] if sampler.total else []))
            yield position, end - position
            position = end

    def run(self, stop) -> bool:
        """Produce until done (True) or stopped (False)."""
        if not self.native:
            return self.put_gathered(stop)
        used = self.gather_on_device()
        self.gather = self.per_component(used)
        try:
            return self.put_runs(stop)
        finally:
            if used != HOST:
                self.gather_on_host()

    def gather_on_host(self) -> None:
        """Undoes :meth:`gather_on_device`: waits for the gathers in flight, unpins."""
        self.port.ring.gather_on_host()

    def put_runs(self, stop) -> bool:
        sampler, ring = self.schedule.sampler, self.port.ring
        ahead = self.order_ahead()
        try:
            for position, count in self.runs():
                epoch, first = divmod(position, sampler.batches_per_epoch)
                indices, first = self.run_indices(epoch, first, count, ahead)
                self.progress.committing(*range(position, position + count))
                began, waited = time.perf_counter(), ring.stats()["producer_wait_s"]
                put = ring.put_rows(self.arrays, indices, sampler.batch_size, first, count, stop, self.room)
                self.busy += time.perf_counter() - began - (ring.stats()["producer_wait_s"] - waited)
                self.samples += int(min(len(indices), (first + put) * sampler.batch_size) - first * sampler.batch_size)
                self.feeder.produced += put
                if put < count:
                    return False
            return True
        finally:
            if ahead is not None:
                ahead.close()

    def run_indices(self, epoch: int, first: int, count: int, ahead: Optional[OrderAhead]):
        """(indices, the first batch's number in them) for batches ``first`` to ``first + count`` of ``epoch``:
        the held epoch whole (no copy), or only those batches' indices where the epoch is not held."""
        sampler = self.schedule.sampler
        if sampler.holds_epochs:
            return (sampler.epoch_indices(epoch) if ahead is None else ahead.epoch_indices(epoch)), first
        start = first * sampler.batch_size
        return sampler.indices(epoch, start, min(start + count * sampler.batch_size, sampler.per_rank)), 0

    def order_ahead(self) -> Optional[OrderAhead]:
        """An :class:`OrderAhead` where the epochs are held and cost a permutation; else None.

        Bucketed epochs call the user's ``bucket_by``: they stay in the Feeder's thread.
        """
        sampler = self.schedule.sampler
        if not sampler.holds_epochs or sampler.bucket_by is not None:
            return None
        return OrderAhead(sampler)

    def put_gathered(self, stop) -> bool:
        """Each batch's rows read by numpy (and cast) into the slot: only the batch's rows are read.

        ``np.take(..., out=)`` only for a C-contiguous source: on any other it
        copies the whole array first.
        """
        for position in self.schedule.pending():
            indices = self.schedule.sampler.batch(position)
            try:
                with self.port.writer(math.inf, stop) as slot:
                    began = time.perf_counter()
                    for array, view in zip(self.arrays, slot.arrays):
                        rows = view[: len(indices)]
                        if array.dtype == rows.dtype and array.flags.c_contiguous:
                            np.take(array, indices, axis=0, out=rows)
                        else:
                            rows[...] = array[indices]  # one batch read; a safe cast (checked by the schema)
                    slot.rows = len(indices)
                    self.busy += time.perf_counter() - began
                    self.progress.committing(position)
            except Stopped:
                return False
            self.samples += len(indices)
            self.feeder.produced += 1
        return True
