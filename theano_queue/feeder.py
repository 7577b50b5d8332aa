"""Feeder: fills a queue from any iterable, or a map-style dataset, in a background thread (and worker processes)."""
import math
import threading
import warnings

from . import _engine, datasets
from .errors import QueueClosed, Stopped
from .monitor import Monitor


class Feeder:
    """Fills ``queue`` from ``dataset`` in the background: a thread, and ``workers`` processes.

    ::

        with Feeder(q, batches):          # starts; on exit stops and joins
            while True:
                try:
                    f()
                except QueueClosed:       # the source is exhausted and drained
                    break

    ``dataset`` is either

    * an **iterable** of elements (whole batches): tuples in component order,
      dicts keyed by component name, or bare arrays for a one-component
      queue.  A generator, a list of batches, any object with ``__iter__``.
      With ``workers=N`` each worker runs its own iterator, which splits
      itself with :func:`theano_queue.worker_info`; elements are taken from
      the workers in turn.
    * or an **array dataset**: a tuple (in component order) or a dict (keyed
      by component name) of arrays in memory, ``np.memmap`` included, one
      per component, sharing their leading axis (the samples).  Rows are
      gathered into the slots by native threads, without the GIL and
      without Python per batch; the arguments below (shuffle, seed, shard,
      epochs, drop_last, state) mean what they mean for a map-style
      dataset.  ``workers`` must stay 0.  (A *list* is still a list of
      batches.)
    * or a **map-style** dataset: ``__len__`` and ``__getitem__`` (and not a
      list, tuple, dict or array), where ``dataset[i]`` is *one sample*: a
      tuple or dict of arrays shaped like the components without their
      leading axis.  The feeder batches samples into elements of ``shape[0]``
      rows, writing each sample into its row of the slot.  A dataset that
      defines ``read_into(i, row)`` is given the row itself instead (a tuple,
      also indexed by component name, of writable views into the slot): it
      decodes there, with no copy.

    ``workers=N`` (N >= 1) produces in N worker processes that write straight
    into the queue's slots (shared memory; page-locked on a GPU queue).  They
    never initialise CUDA; they are started with ``start_method`` ("spawn" by
    default, safe with a CUDA context and threads in this process;
    "forkserver", "fork" or a multiprocessing context where wanted), so the
    dataset must pickle unless it is "fork".  A batch is cut into row ranges
    shared among the workers.  Elements come out in batch order whatever the
    workers' timing; ``ordered=False`` lets whichever batch is done first go
    first.

    A map-style or array dataset's batches: ``shuffle`` gives a permutation per epoch
    drawn from ``seed`` and the epoch number, ``shard=(rank, world)`` this
    rank's part of every epoch as ``DistributedSampler`` does, ``drop_last``
    drops the padding of uneven shards and the epoch's last, partial batch.
    ``epochs`` is the number of passes (``None``: without end; iterables that
    can be run again too).  :attr:`batches_per_epoch` helps a loop count
    them.

    :meth:`state_dict` says where the consumer is; ``Feeder(..., state=saved)``
    continues with the element after the last one the graph took before the
    save (elements queued but not taken are produced again).  The Feeder must
    be its queue's only producer for this count to hold.

    Or, to skip the copy into the queue, give ``fill``: a function called with
    writable arrays (one per component, full shape) that are the next slot
    itself (pinned staging for a GPU queue).  It writes the next element there
    and returns the number of rows written (None for a full batch), or raises
    StopIteration when there is nothing left.

    When the source is exhausted the queue is closed (``close_when_done``), so
    the consumer sees QueueClosed after the last element.  When the source
    raises, the queue fails: the consumer gets every element produced before,
    then :class:`FeederError` whose ``__cause__`` is the source's exception.
    A bad element (wrong dtype or shape) fails the queue the same way.

    Leaving the ``with`` block (normally or by an exception) stops the thread,
    waits for it (``stop_timeout`` seconds at most) and, with
    ``close_when_done``, closes the queue.  Elements already in the queue stay
    there: close it with ``cancel_pending=True`` to drop them.

    ``progress=True`` (or a dict of :class:`Monitor` options) shows a live
    line and a verdict at the end: see :func:`monitor`.

    **Variable-length components** (:class:`~theano_queue.upto` axes): a
    map-style dataset's samples hold arrays of their own length, packed by
    the feeder (in worker processes too; ``read_into`` is not for them); an
    iterable yields batches as ``Queue.put`` takes them (a list of per-row
    arrays, or :class:`~theano_queue.Padded`); a ``fill`` function gets each
    such component's lengths view after the component views.
    ``bucket_by`` groups samples of similar length into batches: a function
    of a sample (``dataset[i]``, or the tuple of an array dataset's rows),
    called once per sample in the Feeder's thread when an epoch's order is
    first needed, or an int array of every sample's length (no call).  Each
    window of ``bucket_window`` batches (default 16) of the epoch's order is
    sorted by length and cut into batches, whose order within the window is
    shuffled from the seed (with ``shuffle``): deterministic, every sample
    once per epoch, and resumable with :meth:`state_dict`.
    """

    def __init__(self, queue, dataset=None, workers=0, shuffle=False, seed=0, shard=(0, 1), epochs=1,
                 drop_last=False, state=None, *, ordered=True, start_method=None, fill=None, close_when_done=True,
                 stop_timeout=10.0, name=None, source=None, progress=False, bucket_by=None, bucket_window=None):
        if source is not None:  # the argument's name before workers came
            if dataset is not None:
                raise TypeError("Feeder(%s): give dataset or source, not both" % queue.name)
            dataset = source
        if (dataset is None) == (fill is None):
            raise TypeError("Feeder(%s): give either a source iterable or a fill function" % queue.name)
        self.queue = queue
        self.source = self.dataset = dataset
        self.epochs = epochs
        self.fill = fill
        self.name = name or "Feeder(%s)" % queue.name
        self.produced = 0
        # Map-style datasets and workers have a producer of their own (datasets.py, workers.py);
        # a plain iterable without workers runs through _elements below.
        self._producer = datasets.producer(self, queue, dataset, workers=workers, shuffle=shuffle, seed=seed,
                                           shard=shard, epochs=epochs, drop_last=drop_last, state=state,
                                           ordered=ordered, start_method=start_method, fill=fill,
                                           bucket_by=bucket_by, bucket_window=bucket_window)
        if isinstance(self._producer, datasets.IterableProgress):
            self.source = self._producer.stream
        self.close_when_done = close_when_done
        self.stop_timeout = stop_timeout
        self.exception = None
        # Set by stop(); it also wakes a put that waits for a free slot.
        self._stop = _engine.Stop(queue._ring)
        self._thread = None
        self.progress, self._monitor = progress, None

    def __repr__(self):
        state = "running" if self.running else "stopped"
        return "<%s %s, %d produced>" % (self.name, state, self.produced)

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    def start(self):
        """Start the background thread.  A Feeder runs once."""
        if self._thread is not None:
            raise RuntimeError("%s: already started; make a new Feeder for the next epoch" % self.name)
        if self.queue.closed:
            # Without this, the epoch would be empty and nothing would say why.
            raise QueueClosed(
                "%s: queue '%s' is closed (the last epoch ended it); call q.reopen() before starting "
                "the next epoch's Feeder" % (self.name, self.queue.name)
            )
        if self._producer is not None:
            self._producer.start()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        self._monitor = Monitor.for_feeder(self, self.progress).start() if self.progress else None
        return self

    def stop(self):
        """Ask the thread to stop: it does before its next put, and at once if it waits on a full queue."""
        self._stop.set()

    def join(self, timeout=None):
        """Wait for the thread; True once it has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def close(self):
        """What leaving the ``with`` block does: stop, wait (``stop_timeout`` at most), close the queue
        (with ``close_when_done``).  Worker processes are gone when it returns."""
        if self._thread is not None:
            self.__exit__(None, None, None)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        if not self.join(self.stop_timeout):
            warnings.warn(
                "%s: still running %g s after stop(); its source is blocked inside next()"
                % (self.name, self.stop_timeout),
                RuntimeWarning,
                stacklevel=2,
            )
        if self.close_when_done:
            self.queue.close()
        if self._monitor is not None:
            self._monitor.close()
        return False

    def _put(self, element):
        """Put, waiting as long as it takes for a free slot.  False once stop() woke it."""
        try:
            self.queue._put(element, math.inf, self._stop)
        except Stopped:
            return False
        return True

    def _fill_one(self):
        """Fill the next slot in place.  False once stopped or the fill function is exhausted."""
        try:
            with self.queue._writer(math.inf, self._stop) as slot:
                # Variable-length components' lengths views follow the components (as dequeue(lengths=True)).
                slot.rows = _from_source(self.fill, *slot.arrays, *slot.lengths.values())
        except (Stopped, StopIteration):
            return False
        return True

    def state_dict(self):
        """Where the consumer is: a small picklable dict for ``Feeder(..., state=...)``.

        Counts what the graph (or ``q.get()``) has taken from the queue, not
        what was produced: resuming from it produces again the elements that
        were queued but not taken, and nothing that was taken.
        """
        if self._producer is None:
            raise TypeError("%s: a Feeder with a fill function keeps no state" % self.name)
        return self._producer.state_dict()

    def stats(self):
        """How busy the producers are, as a dict.

        ``busy`` is the mean fraction of time the workers (or, without
        workers, the feeder's thread) spent producing samples since they
        started; ``worker_busy`` the same per worker.  Near 1 means the input
        pipeline runs flat out: when the queue's ``stats()["consumer_wait_s"]``
        (the model waiting for data) grows as well, more workers help.  Well
        below 1, with the queue's ``producer_wait_s`` growing, the model is the
        bottleneck.  Also ``elements``, ``samples`` and ``samples_per_s``;
        for an array dataset ``gather``, who gathers its rows: ``"host"``, or
        ``"batch"`` on a GPU queue whose GPU copies the rows of at least one
        component itself (those of 256 KiB or more; the host gathers the rest).
        """
        if self._producer is None:
            return {"workers": 0, "elements": self.produced}
        return self._producer.stats()

    @property
    def batches_per_epoch(self):
        """Elements per epoch of a map-style or array dataset (None for an iterable)."""
        sampler = getattr(self._producer, "sampler", None)
        return sampler.batches_per_epoch if sampler is not None else None

    @property
    def planned_elements(self):
        """Elements the whole run puts, where that is known before it runs (else None).

        A list or tuple of batches, or a map-style or array dataset, times ``epochs``.
        """
        if self.epochs is None:
            return None
        if isinstance(self.dataset, (list, tuple)) and self.batches_per_epoch is None:
            return len(self.dataset) * self.epochs
        per_epoch = self.batches_per_epoch
        return None if per_epoch is None else per_epoch * self.epochs

    def _elements(self):
        """Produce until the source ends or stop(); True when the source ended."""
        if self._producer is not None and not isinstance(self._producer, datasets.IterableProgress):
            return self._producer.run(self._stop)
        if self.fill is not None:
            while self._fill_one():
                self.produced += 1
            return not self._stop.is_set()
        elements = iter(self.source)
        while not self._stop.is_set():
            try:
                element = _from_source(next, elements)
            except StopIteration:
                return True
            if not self._put(element):
                return False
            self.produced += 1
        return False

    def _run(self):
        try:
            self._produce()
        finally:
            if self._producer is not None:
                self._producer.shutdown()  # worker processes, after the consumer was told

    def _produce(self):
        try:
            exhausted = self._elements()
        except SourceFailed as failed:  # anything the source raises reaches the consumer,
            self._fail(failed.__cause__)  # QueueClosed from a source that reads another queue too
            return
        except QueueClosed:
            return  # our put found the queue closed under us: the consumer is done
        except BaseException as exc:  # a bad element
            self._fail(exc)
            return
        if exhausted and self.close_when_done:
            self.queue.close()

    def _fail(self, exc):
        self.exception = exc
        self.queue.fail(exc)


class SourceFailed(Exception):
    """The source raised (its exception is the ``__cause__``): kept apart from the puts' own QueueClosed."""


def _from_source(call, *args):
    """call(*args), with what the source raises (but StopIteration, its end) wrapped in SourceFailed."""
    try:
        return call(*args)
    except StopIteration:
        raise
    except BaseException as exc:
        raise SourceFailed() from exc
