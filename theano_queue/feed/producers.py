"""The producers of a Feeder, one class per kind, all behind one interface (:class:`Producer`).

Worker processes have theirs in :mod:`.dispatcher`, array datasets in
:mod:`.arrays`.  Every value goes into the queue through :mod:`.check`.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Optional, Protocol

import numpy as np

from ..core.errors import Stopped
from ..core.spec import element_in_order
from .gil import ThreadClock
from .rows import RowWriter, SampleError, describe_failure, sample_failed
from .sources import stream
from .state import Progress, Schedule, Streams


class Producer(Protocol):
    """What a Feeder's thread runs.

    :meth:`start` (in the caller's thread, before the Feeder's thread
    starts), :meth:`enter_thread` (in the Feeder's thread), :meth:`run`
    (in the Feeder's thread: produce until the source is
    exhausted, True, or ``stop`` is set, False; anything it raises fails the
    queue), :meth:`shutdown` (after run, on every path; idempotent),
    :meth:`state_dict` and :meth:`stats` (from any thread).
    """

    def start(self) -> None: ...

    def run(self, stop) -> bool: ...

    def shutdown(self) -> None: ...

    def state_dict(self) -> dict: ...

    def stats(self) -> dict: ...


class InProcessProducer:
    """A :class:`Producer` (it has the protocol's methods; the protocol needs no base class) whose samples are
    made in this process (the Feeder's thread, or the engine's copy pool); worker processes have
    :class:`~.dispatcher.WorkerProducer`.  ``port`` is the queue's :class:`~theano_queue.core.port.Port`, not the
    Queue."""

    def __init__(self, feeder, port):
        self.feeder, self.port = feeder, port
        self.progress = Progress(port.ring)
        self.busy = 0.0
        self.samples = 0
        self.started = self.ended = None
        self.clock = ThreadClock(port.ring)

    def start(self) -> None:
        self.progress.start()
        self.started = time.perf_counter()

    def run(self, stop) -> bool:
        raise NotImplementedError

    def enter_thread(self) -> None:
        """In the Feeder's thread, before :meth:`run`."""
        self.clock.enter()

    def shutdown(self) -> None:
        self.ended = time.perf_counter()
        self.clock.leave()

    def state_dict(self) -> dict:
        raise TypeError("%s: a Feeder with a fill function keeps no state" % self.feeder.name)

    def elapsed(self) -> float:
        return (self.ended or time.perf_counter()) - self.started if self.started else 0.0

    def stats(self) -> dict:
        elapsed = self.elapsed()
        busy = float(self.busy / elapsed) if elapsed else 0.0
        return dict(
            {"workers": 0, "elements": self.feeder.produced, "busy": busy, "worker_busy": [busy], "busy_s": self.busy},
            **self.clock.stats(),
        )


class SourceFailed(Exception):
    """The source raised (its exception is the ``__cause__``): kept apart from the puts' own QueueClosed."""


def from_source(call, *args):
    """call(*args), with what the source raises (but StopIteration, its end) wrapped in SourceFailed."""
    try:
        return call(*args)
    except StopIteration:
        raise
    except BaseException as exc:
        raise SourceFailed() from exc


class FillProducer(InProcessProducer):
    """``Feeder(fill=...)``: the function writes each element into the next slot itself."""

    def __init__(self, feeder, port, fill):
        super().__init__(feeder, port)
        self.fill = fill

    def run(self, stop) -> bool:
        while True:
            began = time.perf_counter()
            try:
                with self.port.writer(math.inf, stop) as slot:
                    # Variable-length components' lengths views follow the components (as dequeue(lengths=True)).
                    slot.rows = from_source(self.fill, *slot.arrays, *slot.lengths.values())
                    self.busy += time.perf_counter() - began
            except Stopped:
                return False
            except StopIteration:
                return not stop.is_set()
            self.feeder.produced += 1

    def stats(self) -> dict:
        return {"workers": 0, "elements": self.feeder.produced}


def samples_hint(components, element) -> str:
    """What to say when an iterable's element has every component one axis short: it is a sample, not a batch."""
    try:
        values = element_in_order(components, element, "")
    except (TypeError, ValueError):
        return ""
    # A variable-length component's value may be a list of rows of their own lengths: no ndim to ask numpy for.
    if all(np.ndim(v) == len(c.shape) - 1 for c, v in zip(components, values) if c.shape and not c.variable_axes):
        return (
            "this looks like one sample: an iterable, a list too, gives whole batches, each with the batch axis; "
            "for samples, stack them (Feeder(q, (x, y)), an array dataset) or give an object with __len__ and "
            "__getitem__ (a map-style dataset, which the Feeder batches)"
        )
    return ""


ONE_STREAM = (0, None)  # the key of every batch of an iterable run in the Feeder's thread: its one stream


class IterableProducer(InProcessProducer):
    """An iterable of whole batches, run in the Feeder's thread; each batch goes through ``Queue.put``'s door.
    Its schedule is the worker pool's with one stream: a key per batch, logged before its commit."""

    def __init__(self, feeder, port, dataset, epochs: Optional[int], skip: int):
        super().__init__(feeder, port)
        self.schedule = Streams([skip], self.progress)
        self.stream = stream(dataset, epochs, skip, timer=self)

    def run(self, stop) -> bool:
        try:
            ended = self.put_each(stop)
        except BaseException:
            with contextlib.suppress(Exception):  # the run's own failure is the one to tell
                self.port.flush_given()
            raise
        self.port.flush_given()  # every element given is in the queue before the run counts as ended
        return ended

    def put_each(self, stop) -> bool:
        elements = iter(self.stream)
        # Each element goes from the source into this box and from the box into the queue, so that this
        # frame holds no reference to it: the engine may copy it after the put returns (Port.put_given).
        box: list = []
        while not stop.is_set():
            try:
                box.append(from_source(next, elements))
            except StopIteration:
                return True
            self.progress.committing_one(ONE_STREAM)
            try:
                self.port.put_given(box, math.inf, stop)
            except BaseException as error:
                self.progress.withdraw()  # refused or stopped before its commit: not a position of the run
                if isinstance(error, Stopped):
                    return False
                element = box.pop() if box else None
                hint = samples_hint(self.port.components, element) if isinstance(error, ValueError) else ""
                if not hint:
                    raise
                raise ValueError("%s; %s" % (error, hint)) from None
            self.feeder.produced += 1
        return False

    def state_dict(self) -> dict:
        return self.schedule.state_dict()


class InlineMapProducer(InProcessProducer):
    """A map-style dataset produced in the Feeder's own thread, sample by sample, into the slot."""

    def __init__(self, feeder, port, dataset: Any, sampler, cursor):
        super().__init__(feeder, port)
        self.schedule = Schedule(sampler, cursor, self.progress)
        self.writer = RowWriter(port.layout, dataset, port.name) if dataset is not None else None

    def run(self, stop) -> bool:
        for position in self.schedule.pending():
            indices = self.schedule.sampler.batch(position)
            try:
                # The writer gives the slot back if filling it raises, and commits it otherwise.
                with self.port.writer(math.inf, stop) as slot:
                    self._fill(slot, position, indices)
            except Stopped:
                return False
            self.samples += len(indices)
            self.feeder.produced += 1
        return True

    def _fill(self, slot, position, indices):
        began = time.perf_counter()
        try:
            self.writer.fill(slot.engine_views, 0, indices.tolist())
        except SampleError as exc:
            cause = exc.__cause__
            text = describe_failure(cause)
            raise sample_failed(
                "sample %d (batch %d of epoch %d) raised %s: %s\n\nTraceback:\n%s"
                % (
                    exc.index,
                    position % self.schedule.sampler.batches_per_epoch,
                    self.schedule.sampler.epoch_of(position),
                    type(cause).__name__,
                    cause,
                    text.rstrip(),
                ),
                exc.index,
                None,
                text,
                cause,
            ) from cause
        finally:
            self.busy += time.perf_counter() - began
        slot.rows = len(indices)
        self.progress.committing(position)

    def state_dict(self) -> dict:
        return self.schedule.state_dict()

    def stats(self) -> dict:
        return sampled_stats(self, super().stats())


def sampled_stats(producer, stats: dict) -> dict:
    """``stats`` with what a producer of a sampled dataset (``samples``, ``schedule``) adds to them."""
    elapsed = producer.elapsed()
    stats.update(
        samples=producer.samples,
        samples_per_s=producer.samples / elapsed if elapsed else 0.0,
        batches_per_epoch=producer.schedule.sampler.batches_per_epoch,
    )
    return stats
