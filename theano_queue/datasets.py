"""What a Feeder is given, and how it goes into slots.

* :func:`is_map_style` tells a map-style dataset (one sample per index) from
  an iterable of whole batches.
* :class:`RowWriter` writes samples into the rows of a slot: through the
  dataset's ``read_into(i, row)`` (no copy) or by copying what
  ``dataset[i]`` returns.  The same code runs in the feeder's thread and in
  worker processes.
* :func:`stream` runs an iterable for a number of epochs, from a resume point.
* :func:`array_sources` tells an array dataset (a tuple or dict of arrays,
  one per component) and checks it; :class:`ArrayProducer` feeds it by
  native gathers.
* :class:`InlineMapProducer` and :class:`IterableProgress` are the producers
  of a Feeder without workers; ``theano_queue.workers`` has the one with.
"""
import collections
import collections.abc
import logging
import math
import os
import threading
import time
import traceback

import numpy as np

from .errors import FeederError, QueueError, Stopped
from .sampler import STATE_VERSION
from .spec import element_arrays, element_in_order

logger = logging.getLogger("theano_queue")

#: For benchmarks only: who gathers an array dataset's rows on a GPU queue.
#: "auto" (the default when unset) lets the engine choose per component (the
#: GPU's batch copy for rows of 256 KiB or more, the host for the rest);
#: "batch" and "host" force one for every component, so that
#: bench/arrays_bench.py can compare them in one run.  Not an interface for
#: users: the default is the measured choice.
GATHER_ENV = "THEANO_QUEUE_GATHER"
GATHER_MECHANISMS = ("auto", "batch", "host")

_NOT_MAP_STYLE = (list, tuple, dict, np.ndarray, str, bytes, bytearray, memoryview, range)


def is_map_style(dataset):
    """True for a map-style dataset: ``__len__`` and ``__getitem__``, one sample per index.

    Lists, tuples, dicts, ranges, strings and arrays are not (a list of
    batches is an iterable of batches, as before), nor is anything that is a
    PyTorch-style ``IterableDataset``.
    """
    if isinstance(dataset, _NOT_MAP_STYLE):
        return False
    if any(cls.__name__ == "IterableDataset" for cls in type(dataset).__mro__):
        return False
    return hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")


def row_type(names):
    """A tuple type for one row's views that is also indexed by component name."""
    index = {name: i for i, name in enumerate(names)}

    class Row(tuple):
        """Writable views of one row of a slot, one per component.

        ``x, y = row``, ``row[0]`` and ``row["x"]`` all work; ``row.keys()``
        gives the component names.
        """

        __slots__ = ()

        def __getitem__(self, key):
            if isinstance(key, str):
                try:
                    key = index[key]
                except KeyError:
                    raise KeyError("no component %r; the components are %s" % (key, list(names))) from None
            return tuple.__getitem__(self, key)

        def keys(self):
            return list(names)

        def items(self):
            return list(zip(names, self))

    return Row


class RowWriter:
    """Writes samples of ``dataset`` into rows of slots laid out as ``layout`` (a :class:`~.layout.Layout`).

    A variable-length component's sample is written at the start of its row
    (the row at its bounds) and its lengths into the lengths' row; the
    element is packed when the slot is committed (``Layout.finish``).
    """

    def __init__(self, layout, dataset, queue_name):
        self.layout = layout
        self.components = layout.components
        self.dataset = dataset
        self.queue_name = queue_name
        self.read_into = getattr(dataset, "read_into", None)
        self.Row = row_type([c.name for c in self.components])

    def fill(self, views, row0, indices):
        """Writes the samples ``indices`` into rows ``row0, row0 + 1, ...`` of the slot's engine ``views``.

        On failure raises :class:`SampleError` naming the index.
        """
        Row, read_into, dataset = self.Row, self.read_into, self.dataset
        arrays, lengths = self.layout.staged(views, reset_lengths=False)
        for r, index in enumerate(indices, row0):
            try:
                row = Row([view[r, ...] for view in arrays])
                if read_into is not None:
                    read_into(index, row)
                else:
                    self.write(row, dataset[index], lengths, r)
            except Exception as exc:
                raise SampleError(index) from exc

    def write(self, row, sample, lengths=None, r=None):
        values = element_arrays(self.components, sample, self.queue_name)
        if not isinstance(values, (list, tuple)) or len(values) != len(self.components):
            raise ValueError("a sample must give one array per component (%s), got %r"
                             % (", ".join(c.name for c in self.components), type(sample).__name__))
        for i, (component, dst, value) in enumerate(zip(self.components, row, values)):
            value = np.asarray(value)
            variable = self.layout.variables.get(i)
            if variable is not None:
                lengths[component.name][r] = variable.write_row(dst, value, self.queue_name)
                continue
            if value.shape != dst.shape:
                raise ValueError("component %r: a sample must have shape %s (the component's without its batch "
                                 "axis), got %s" % (component.name, dst.shape, value.shape))
            try:
                np.copyto(dst, value, casting="same_kind")
            except TypeError:
                raise TypeError("component %r: a sample of dtype %s does not fit %s"
                                % (component.name, value.dtype, component.dtype)) from None


class SampleError(Exception):
    """Internal: producing sample ``index`` raised (the cause)."""

    def __init__(self, index):
        super().__init__(index)
        self.index = index


def write_batch(layout, views, element, queue_name):
    """Copies a whole batch (as an iterable source yields it) into a slot's views; returns rows per engine component.

    Checks like ``Queue.put``: the dtype must match, the leading axis may be
    shorter than the component's, the other axes are fixed (variable-length
    components are packed as ``Queue.put`` packs them).
    """
    if layout.varying:
        return layout.prepare(element_in_order(layout.components, element, queue_name), queue_name)(views)
    components = layout.components
    values = element_arrays(components, element, queue_name)
    if not isinstance(values, (list, tuple)) or len(values) != len(components):
        raise ValueError("Queue %r: expected %d components (%s), got %r" % (
            queue_name, len(components), ", ".join(c.name for c in components), type(element).__name__))
    arrays = []
    for component, value in zip(components, values):
        if isinstance(value, np.ndarray):
            if value.dtype != component.dtype:
                raise TypeError("Queue %r, component %r: expected dtype %s, got %s"
                                % (queue_name, component.name, component.dtype, value.dtype))
        else:
            value = np.asarray(value, dtype=component.dtype)
        shape, want = value.shape, component.shape
        if len(shape) != len(want) or (want and (shape[0] > want[0] or shape[1:] != want[1:])):
            raise ValueError("Queue %r, component %r: expected shape %s with at most %s rows, got %s"
                             % (queue_name, component.name, want, want[0] if want else 1, shape))
        arrays.append(value)
    rows = []
    for view, value in zip(views, arrays):
        if value.ndim:
            view[: len(value)] = value
            rows.append(len(value))
        else:
            view[...] = value
            rows.append(1)
    return rows


def stream(dataset, epochs, skip=0, timer=None):
    """The elements of ``epochs`` passes over ``dataset`` (None: without end), the first ``skip`` left out.

    In a worker, a list or tuple of batches is cut up: worker ``id`` of
    ``count`` (see :func:`~theano_queue.worker_info`) takes every ``count``-th
    element of the epochs laid end to end, starting at its ``id``.  Other
    iterables split themselves.

    The left-out elements are still produced (an iterable cannot jump).  A
    pass that yields nothing ends the stream.  With ``timer``, the time spent
    inside the dataset's ``next()`` is added to ``timer.busy``.
    """
    from .workers import worker_info

    me, count = worker_info()
    if isinstance(dataset, (list, tuple)) and count > 1:
        # A list cannot split itself: worker `me` takes elements me, me + count, ... of all the epochs
        # one after another, so that the workers taking turns give the list's order back.
        n, j = len(dataset), me
        while n and (epochs is None or j < epochs * n):
            element, j = dataset[j % n], j + count
            if skip:
                skip -= 1
                continue
            yield element
        return
    epoch = 0
    while epochs is None or epoch < epochs:
        iterator = iter(dataset)
        if epoch and iterator is dataset:
            raise ValueError("epochs=%r needs an iterable that can be run again (a list, or an object whose "
                             "__iter__ starts over); this one is an iterator, which runs once" % (epochs,))
        empty = True
        while True:
            started = time.perf_counter()
            try:
                element = next(iterator)
            except StopIteration:
                break
            finally:
                if timer is not None:
                    timer.busy += time.perf_counter() - started
            empty = False
            if skip:
                skip -= 1
                continue
            yield element
        if empty:
            return
        epoch += 1


def worker_failed(message, index=None, worker=None, worker_traceback=None, cause=None):
    """The FeederError that reports a failed sample, carrying where it happened."""
    exc = FeederError(message)
    exc.index, exc.worker, exc.worker_traceback = index, worker, worker_traceback
    exc.__cause__ = cause
    return exc


def iterable_state(consumed):
    return {"version": STATE_VERSION, "kind": "iterable", "consumed": [int(c) for c in consumed]}


def iterable_skips(state, streams):
    """Per-stream counts of elements already consumed, from a saved state (zeros for None)."""
    if state is None:
        return [0] * streams
    if not isinstance(state, dict) or state.get("kind") != "iterable":
        raise ValueError("this state was not saved by a Feeder over an iterable: %r" % (state,))
    consumed = list(state.get("consumed", ()))
    if len(consumed) != streams:
        raise ValueError("the state was saved with %d worker stream(s), this Feeder runs %d: an iterable's "
                         "streams depend on tq.worker_info(), resume with the same number of workers"
                         % (len(consumed), streams))
    return consumed


class Progress:
    """What the consumer has taken of what a producer committed, for state_dict().

    Producers append a key per element to ``log`` *before* committing it, in
    commit order, which is the order consumers take elements in.  The ring's
    ``dequeued`` counter, less its value when the feeder started, says how
    many of them were taken.
    """

    def __init__(self, queue):
        self.ring = queue._ring
        self.lock = threading.Lock()
        self.log = collections.deque()
        self.base = None
        self.taken = 0

    def start(self):
        stats = self.ring.stats()
        self.base = stats["dequeued"] + stats["size"]

    def consumed_keys(self):
        """Keys of elements taken since the last call (under the lock)."""
        if self.base is None:
            return []
        taken = self.ring.stats()["dequeued"] - self.base
        keys = []
        while self.taken < taken and self.log:
            keys.append(self.log.popleft())
            self.taken += 1
        return keys


class InlineMapProducer:
    """A map-style dataset produced in the feeder's own thread, sample by sample, into the slot."""

    def __init__(self, feeder, queue, dataset, sampler, cursor):
        self.feeder, self.queue = feeder, queue
        self.sampler, self.start_cursor, self.consumed = sampler, cursor.copy(), cursor.copy()
        self.writer = RowWriter(queue._layout, dataset, queue.name)
        self.progress = Progress(queue)
        self.busy = self.samples = 0
        self.started = self.ended = None

    def start(self):
        self.progress.start()
        self.started = time.perf_counter()

    def run(self, stop):
        """Produce until done (True) or stopped (False); stop (an ``_engine.Stop``) also ends the wait for a slot."""
        for position in self.sampler.pending(self.start_cursor):
            indices = self.sampler.batch(position)
            try:
                # The writer gives the slot back if filling it raises, and commits it otherwise.
                with self.queue._writer(math.inf, stop) as slot:
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
            text = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
            raise worker_failed("sample %d (batch %d of epoch %d) raised %s: %s\n\nTraceback:\n%s" % (
                exc.index, position % self.sampler.batches_per_epoch, self.sampler.epoch_of(position),
                type(cause).__name__, cause, text.rstrip()), exc.index, None, text, cause) from cause
        finally:
            self.busy += time.perf_counter() - began
        slot.rows = len(indices)
        with self.progress.lock:  # before the commit: consumers may take it at once
            self.progress.log.append(position)

    def shutdown(self):
        self.ended = time.perf_counter()

    def state_dict(self):
        with self.progress.lock:
            for position in self.progress.consumed_keys():
                self.consumed.add(position)
            return self.sampler.state_dict(self.consumed)

    def stats(self):
        elapsed = (self.ended or time.perf_counter()) - self.started if self.started else 0.0
        busy = self.busy / elapsed if elapsed else 0.0
        return {"workers": 0, "elements": self.feeder.produced, "samples": self.samples, "busy": busy,
                "worker_busy": [busy], "samples_per_s": self.samples / elapsed if elapsed else 0.0,
                "batches_per_epoch": self.sampler.batches_per_epoch}


def array_sources(dataset, components, where):
    """The arrays of an array dataset in component order, checked; None when ``dataset`` is not one.

    An array dataset is a tuple (or a dict keyed by component name) of numpy
    arrays (``np.memmap`` included), one per component; a list is a list of
    batches.  The checks are put's: the dtype must be the component's or cast
    to it safely (that component is then converted once, a copy of it in
    memory), each row shaped like the component without its batch axis; every
    array has the same number of rows.
    """
    names = [c.name for c in components]
    if isinstance(dataset, dict):
        if not dataset or not all(isinstance(v, np.ndarray) for v in dataset.values()):
            return None
        if sorted(dataset) != sorted(names):
            raise ValueError("%s: an array dataset given as a dict needs one array per component, keyed %s; got %s"
                             % (where, names, sorted(dataset)))
        arrays = [dataset[name] for name in names]
    elif isinstance(dataset, tuple) and dataset and all(isinstance(v, np.ndarray) for v in dataset):
        if len(dataset) != len(components):
            raise ValueError("%s: an array dataset needs one array per component (%s), got %d arrays"
                             % (where, ", ".join(names), len(dataset)))
        arrays = list(dataset)
    else:
        return None
    checked = []
    for component, array in zip(components, arrays):
        name = "%s: component %r" % (where, component.name)
        if not component.shape:
            raise ValueError("%s has no batch axis: an array dataset gives every component rows" % name)
        if array.dtype != component.dtype:
            if not np.can_cast(array.dtype, component.dtype, "safe"):
                raise TypeError("%s: expected dtype %s, got %s, which does not cast safely to it"
                                % (name, component.dtype, array.dtype))
            array = array.astype(component.dtype)  # once; documented: a copy of the component
        if array.ndim != len(component.shape) or array.shape[1:] != tuple(component.shape[1:]):
            raise ValueError("%s: expected rows of shape %s (the component's without its batch axis), got an array "
                             "of shape %s" % (name, tuple(component.shape[1:]), array.shape))
        if array.ndim > 1 and not array[:1].flags.c_contiguous:
            array = np.ascontiguousarray(array)  # the gather copies whole rows
        checked.append(array)
    lengths = {len(a) for a in checked}
    if len(lengths) != 1:
        raise ValueError("%s: the arrays of an array dataset share their leading axis; got %s" % (
            where, ", ".join("%s: %d rows" % (c.name, len(a)) for c, a in zip(components, checked))))
    return checked


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
        #: Who gathers the rows while it runs: "host", or "batch" when the GPU copies some component's.
        self.gather = "host"

    def gather_on_device(self):
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

    def stats(self):
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

    def run(self, stop):
        """Produce until done (True) or stopped (False)."""
        self.gather = self.gather_on_device()
        try:
            return self.put_runs(stop)
        finally:
            if self.gather != "host":
                self.queue._ring.gather_on_host()  # waits for the gathers in flight, unpins

    def put_runs(self, stop):
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


def requested_gather(where):
    """The gather mechanism THEANO_QUEUE_GATHER asks for ("auto" when unset), checked."""
    value = os.environ.get(GATHER_ENV) or "auto"
    if value not in GATHER_MECHANISMS:
        raise ValueError("%s: %s must be one of %s, got %r" % (where, GATHER_ENV, ", ".join(GATHER_MECHANISMS), value))
    return value


class IterableProgress:
    """state_dict() and stats() of a Feeder over an iterable without workers (the Feeder's own loop puts)."""

    def __init__(self, feeder, queue, dataset, epochs, skip):
        self.feeder, self.skip = feeder, skip
        self.progress = Progress(queue)
        self.busy = 0.0
        self.started = self.ended = None
        self.stream = stream(dataset, epochs, skip, timer=self)

    def run(self, stop):  # the Feeder's own loop runs instead
        raise NotImplementedError

    def shutdown(self):
        self.ended = time.perf_counter()

    def start(self):
        self.progress.start()
        self.started = time.perf_counter()

    def state_dict(self):
        if self.progress.base is None:
            return iterable_state([self.skip])
        taken = self.progress.ring.stats()["dequeued"] - self.progress.base
        return iterable_state([self.skip + max(0, taken)])

    def stats(self):
        elapsed = (self.ended or time.perf_counter()) - self.started if self.started else 0.0
        busy = self.busy / elapsed if elapsed else 0.0
        return {"workers": 0, "elements": self.feeder.produced, "busy": busy, "worker_busy": [busy]}


def bucket_lengths(bucket_by, dataset, arrays, where):
    """The Sampler's length function for ``Feeder(bucket_by=...)``: indices -> lengths.

    ``bucket_by`` is a function of one sample (``dataset[i]``, or the tuple of
    an array dataset's rows ``i``), called in the Feeder's thread, or an
    array of every sample's length.
    """
    if bucket_by is None:
        return None
    if not callable(bucket_by):
        given = np.asarray(bucket_by)
        count = len(arrays[0]) if arrays is not None else len(dataset)
        if given.shape != (count,) or given.dtype.kind not in "iu":
            raise ValueError("%s: bucket_by must be a function of a sample or an int array of the %d samples' "
                             "lengths, got %r" % (where, count, bucket_by if given.ndim == 0 else given.shape))
        return lambda indices: given[indices]
    if arrays is not None:
        return lambda indices: [bucket_by(tuple(a[i] for a in arrays)) for i in indices.tolist()]
    return lambda indices: [bucket_by(dataset[i]) for i in indices.tolist()]


def producer(feeder, queue, dataset, *, workers, shuffle, seed, shard, epochs, drop_last, state, ordered,
             start_method, fill, bucket_by=None, bucket_window=None):
    """What produces for a Feeder: None (a fill function, today's loop), :class:`IterableProgress` (an
    iterable in the feeder's thread, today's loop), :class:`InlineMapProducer` or a
    :class:`~theano_queue.workers.WorkerProducer`."""
    where = "Feeder(%s)" % queue.name
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 0:
        raise ValueError("%s: workers must be an int >= 0, got %r" % (where, workers))
    workers = int(workers)
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0):
        raise ValueError("%s: epochs must be an int >= 0 or None, got %r" % (where, epochs))
    if fill is not None:
        if (workers or shuffle or state is not None or tuple(shard) != (0, 1) or drop_last or epochs != 1
                or bucket_by is not None):
            raise TypeError("%s: a fill function runs in the feeder's thread alone; workers, shuffle, shard, "
                            "drop_last, epochs, bucket_by and state need a dataset" % where)
        return None
    arrays = array_sources(dataset, queue.components, where)
    if arrays is not None and queue._layout.varying:
        raise TypeError("%s: an array dataset holds rows of one shape; component(s) %s have a variable (upto) axis: "
                        "give a map-style dataset whose samples have their own lengths" % (
                            where, ", ".join(map(repr, queue._layout.variable_names()))))
    if is_map_style(dataset) and queue._layout.varying and hasattr(dataset, "read_into"):
        raise TypeError("%s: read_into(i, row) writes into rows of fixed shape; with variable-length component(s) "
                        "%s the feeder reads dataset[i] instead: remove read_into" % (
                            where, ", ".join(map(repr, queue._layout.variable_names()))))
    if arrays is not None or is_map_style(dataset):
        flat = [c.name for c in queue.components if not c.shape]
        if flat:
            raise ValueError("%s: a map-style dataset gives one sample per row, but component(s) %s have no batch "
                             "axis" % (where, ", ".join(map(repr, flat))))
        sizes = {c.shape[0] for c in queue.components}
        if len(sizes) != 1:
            raise ValueError("%s: a map-style dataset fills every component with the same number of rows; the "
                             "components' leading axes differ: %s" % (where, ", ".join(
                                 "%s: %d" % (c.name, c.shape[0]) for c in queue.components)))
        from .sampler import Sampler

        try:
            sampler = Sampler(len(arrays[0]) if arrays else len(dataset), sizes.pop(), shuffle, seed, shard,
                              drop_last, epochs, bucket_lengths(bucket_by, dataset, arrays, where), bucket_window)
            cursor = sampler.cursor(state)
        except ValueError as exc:
            raise ValueError("%s: %s" % (where, exc)) from None
        if arrays is not None:
            if workers:
                raise TypeError("%s: an array dataset is gathered by native threads in this process (the copy pool, "
                                "theano_queue._engine.set_copy_threads); worker processes would only copy the same rows again: leave "
                                "workers=0" % where)
            return ArrayProducer(feeder, queue, arrays, sampler, cursor)
        if workers == 0:
            return InlineMapProducer(feeder, queue, dataset, sampler, cursor)
        from .workers import WorkerProducer

        return WorkerProducer(feeder, queue, dataset, workers, "map", sampler=sampler, cursor=cursor, seed=seed,
                              ordered=ordered, start_method=start_method)
    if bucket_by is not None or bucket_window is not None:
        raise ValueError("%s: bucket_by groups the samples of a map-style dataset (or an array dataset) into "
                         "batches; an iterable yields whole batches already" % where)
    if shuffle or tuple(shard) != (0, 1) or drop_last:
        raise ValueError("%s: shuffle, shard and drop_last choose the samples of a map-style dataset (__len__ and "
                         "__getitem__ giving one sample); an iterable yields whole batches in its own order: split "
                         "it with tq.worker_info() and your rank yourself" % where)
    if not hasattr(dataset, "__iter__"):
        raise TypeError("%s: expected an iterable of batches or a map-style dataset, got %r"
                        % (where, type(dataset).__name__))
    if epochs != 1 and isinstance(dataset, collections.abc.Iterator):
        raise ValueError("%s: epochs=%r needs an iterable that can be run again (a list, or an object whose "
                         "__iter__ starts over); a generator or iterator runs once" % (where, epochs))
    try:
        skips = iterable_skips(state, max(workers, 1))
    except ValueError as exc:
        raise ValueError("%s: %s" % (where, exc)) from None
    if workers == 0:
        return IterableProgress(feeder, queue, dataset, epochs, skips[0])
    from .workers import WorkerProducer

    return WorkerProducer(feeder, queue, dataset, workers, "iter", skips=skips, epochs=epochs, seed=seed,
                          ordered=ordered, start_method=start_method)
