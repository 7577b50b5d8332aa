"""Feeder: runs one producer (:mod:`.producers`) in a background thread, attached to its queue."""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable, Literal, Optional, Tuple, Union

from .. import _engine
from ..core.arguments import seconds
from ..core.errors import QueueClosed
from ..core.run import Member
from ..tools.monitor import Monitor
from .factory import make_producer
from .producers import IterableProducer, SourceFailed
from .state import NotExact


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
      batches.)  With ``device=True`` (GPU queues) the arrays are copied
      to device memory once, when the Feeder starts, and each batch is
      gathered there by the GPU, from the same sampler: nothing crosses the
      bus per batch but its row numbers.  A dataset that does not fit in
      the GPU's free memory is refused by :meth:`start` (ValueError naming
      the sizes, nothing queued); a CPU queue refuses ``device=True`` here.
      The device copy is freed when the run ends: give ``epochs`` (or
      ``None``) rather than a Feeder per epoch, which uploads each time.
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
    dataset must pickle unless it is "fork": it is pickled here, by
    reference wherever the workers can import it (a class at the top level
    of the script or a module; the worker's module globals are its own), by
    value only otherwise, and a part that does not pickle is named.  Spawn
    and forkserver workers import the main script again: keep the model
    under ``if __name__ == "__main__":``.  A batch is cut into row ranges
    shared among the workers.  Elements come out in batch order whatever the
    workers' timing; ``ordered=False`` lets whichever batch is done first go
    first.  ``workers="auto"`` (map-style datasets) starts one worker and
    adds workers while the model waits for input and the workers are busy,
    up to the cores, ``max_workers`` and ``memory_budget`` (bytes; half the
    available memory by default) over a worker's resident memory; it
    retires one when they idle.  The batches are the sampler's whatever the
    count; ``stats()["auto"]`` says what was decided and why.

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
    be its queue's only producer for this count to hold: otherwise
    :meth:`state_dict` raises ``NotExact`` (a RuntimeError) saying why.

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
    Every value, from every kind of source, is checked by ``Queue.put``'s
    rules: the component's dtype or one that casts to it safely (Python
    values where numpy calls the cast safe), its shape, one per component.
    With workers, ``timeout`` bounds the seconds a worker may spend on what
    it was handed (its rows of one batch, or one element of an iterable), as
    ``DataLoader(timeout=)`` bounds a batch: past it the consumer gets a
    :class:`FeederError` naming the worker, its pid and the sample it is on.
    Without it, one warning on the ``theano_queue`` logger says when a worker
    has been on its samples for over 30 s.  A worker that starts is bounded
    too: one that shows no progress (no start-up phase begun, no processor
    time used) for ``timeout`` seconds (120 without it), or is still starting
    after ``startup_timeout`` seconds (120; busy or not), fails the Feeder
    with a :class:`FeederError` naming the worker, its pid and what it was
    doing (importing the script, unpickling or opening the dataset); every
    10 s until then a warning names the workers still starting.

    Leaving the ``with`` block (normally or by an exception) stops the thread,
    waits for it (``stop_timeout`` seconds at most) and, with
    ``close_when_done``, closes the queue once no other Feeder is attached to
    it (several Feeders may fill one queue: it closes when the last is
    done; one started after the others ran out, before the consumer took
    the last element, joins their epoch).  Elements already in the queue
    stay there for the consumer; the next ``q.reopen()`` drops those of an
    epoch left early, so that none of them reaches the next epoch.
    ``q.reopen()`` also stops a Feeder still running and drops what it
    queued: nothing it produced can land in the reopened queue.

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

    def __init__(
        self,
        queue,
        dataset: Any = None,
        workers: Union[int, str] = 0,
        shuffle: bool = False,
        seed: int = 0,
        shard: Tuple[int, int] = (0, 1),
        epochs: Optional[int] = 1,
        drop_last: bool = False,
        state: Optional[dict] = None,
        *,
        ordered: bool = True,
        start_method: Any = None,
        fill: Optional[Callable[..., Optional[int]]] = None,
        close_when_done: bool = True,
        stop_timeout: float = 10.0,
        name: Optional[str] = None,
        source: Any = None,
        progress: Any = False,
        bucket_by: Any = None,
        bucket_window: Optional[int] = None,
        timeout: Optional[float] = None,
        device: bool = False,
        startup_timeout: float = 120.0,
        max_workers: Optional[int] = None,
        memory_budget: Optional[int] = None,
    ):
        if source is not None:  # the argument's name before workers came
            if dataset is not None:
                raise TypeError("Feeder(%s): give dataset or source, not both" % queue.name)
            dataset = source
        if (dataset is None) == (fill is None):
            raise TypeError("Feeder(%s): give either a source iterable or a fill function" % queue.name)
        stop_timeout = seconds(
            stop_timeout,
            "Feeder(%s): stop_timeout" % queue.name,
            "how long leaving the with block waits for the thread",
        )
        self.queue = queue
        self.source = self.dataset = dataset
        self.epochs = epochs
        self.fill = fill
        port = queue.port
        self.name = name or port.run.feeder_name()  # unique per queue: messages name Feeders apart
        self.close_when_done = close_when_done
        self.stop_timeout = stop_timeout
        # What the thread holds: the run's state and the queue's port, never this Feeder nor the Queue, so
        # that a Feeder and Queue the user dropped are collected (and the Queue's ring closed, which ends us).
        self._run = _Run(self.name, port, close_when_done)
        self._producer = make_producer(
            self._run,
            port,
            dataset,
            workers=workers,
            shuffle=shuffle,
            seed=seed,
            shard=shard,
            epochs=epochs,
            drop_last=drop_last,
            state=state,
            ordered=ordered,
            start_method=start_method,
            fill=fill,
            bucket_by=bucket_by,
            bucket_window=bucket_window,
            timeout=timeout,
            device=device,
            startup_timeout=startup_timeout,
            max_workers=max_workers,
            memory_budget=memory_budget,
        )
        if isinstance(self._producer, IterableProducer):
            self.source = self._producer.stream
        # Set by stop(); it also wakes a put that waits for a free slot.
        self._stop = _engine.Stop(port.ring)
        self._thread: Optional[threading.Thread] = None
        self.progress, self._monitor = progress, None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return "<%s %s, %d produced>" % (self.name, state, self.produced)

    @property
    def produced(self) -> int:
        """Elements put so far."""
        return self._run.produced

    @property
    def exception(self) -> Optional[BaseException]:
        """What failed the run (the source's exception, a bad element, a worker's failure), else None."""
        return self._run.exception

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "Feeder":
        """Start the background thread.  A Feeder runs once.

        Raises QueueClosed on a queue whose epoch has ended (its consumer
        took the last element, the queue was closed, or a ``with`` block
        left it): ``q.reopen()`` starts the next one.
        """
        if self._thread is not None:
            raise RuntimeError("%s: already started; make a new Feeder for the next epoch" % self.name)
        thread = threading.Thread(
            target=_thread_main, args=(self._run, self._producer, self._stop), name=self.name, daemon=True
        )
        # Before anything starts: an epoch that has ended would be empty and nothing would say why.
        self._run.member = self._run.port.run.attach(self.name, self._stop, thread, self.stop_timeout, self)
        try:
            self._producer.start()
        except BaseException:
            self._run.member.withdraw()
            raise
        self._thread = thread
        self._thread.start()
        self._monitor = Monitor.for_feeder(self, self.progress).start() if self.progress else None
        return self

    def stop(self) -> None:
        """Ask the thread to stop: it does before its next put, and at once if it waits on a full queue."""
        self._stop.set()

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for the thread; True once it has ended."""
        if self._thread is not None:
            # Past TIMEOUT_MAX (a stop_timeout of 1e12 s, or inf) Python's lock cannot count: that is no limit.
            self._thread.join(None if timeout is not None and timeout >= threading.TIMEOUT_MAX else timeout)
        return not self.running

    def close(self) -> None:
        """What leaving the ``with`` block does: stop, wait (``stop_timeout`` at most), close the queue
        (with ``close_when_done``, once no other Feeder is attached).  Worker processes are gone when it returns."""
        if self._thread is not None:
            self.__exit__(None, None, None)

    def __enter__(self) -> "Feeder":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self.stop()
        if not self.join(self.stop_timeout):
            warnings.warn(
                "%s: still running %g s after stop(); its source is blocked inside next()"
                % (self.name, self.stop_timeout),
                RuntimeWarning,
                stacklevel=2,
            )
        if self._run.member is not None:
            self._run.member.leave(self.close_when_done)
        if self._monitor is not None:
            self._monitor.close()
        return False

    def state_dict(self) -> dict:
        """Where the consumer is: a small picklable dict for ``Feeder(..., state=...)``.

        Counts what the graph (or ``q.get()``) has taken from the queue, not
        what was produced: resuming from it produces again the elements that
        were queued but not taken, and nothing that was taken.
        """
        others = self._run.member.others_named() if self._run.member is not None else []
        try:
            if others:
                raise NotExact(
                    "%s also fed queue %r during this run, and the queue counts what its consumers took, not "
                    "whose it was" % (" and ".join(others), self.queue.name)
                )
            return self._producer.state_dict()
        except NotExact as exc:
            raise NotExact(
                "%s.state_dict(): cannot be exact: %s; resuming from it would skip or repeat elements. Give "
                "each Feeder whose position you save a queue of its own" % (self.name, exc)
            ) from None

    def activity(self) -> str:
        """What this Feeder is doing, in words (the stall warnings quote it)."""
        if self._thread is None:
            return "not started"
        if not self.running:
            return "ended (%d element(s) put)%s" % (self.produced, ", failed" if self.exception else "")
        describe = getattr(self._producer, "activity", None)
        if describe is not None:
            try:
                return describe()
            except (RuntimeError, StopIteration):  # its thread changed what it read: the next call will do
                pass
        return "its thread produces (%d element(s) put so far)" % self.produced

    def stats(self) -> dict:
        """How busy the producers are, as a dict.

        ``busy`` is the mean fraction of time the workers (or, without
        workers, the feeder's thread) spent producing samples since they
        started (a float); ``worker_busy`` the same per worker (a list).  Near 1 means the input
        pipeline runs flat out: when the queue's ``stats()["consumer_wait_s"]``
        (the model waiting for data) grows as well, more workers help.  Well
        below 1, with the queue's ``producer_wait_s`` growing, the model is the
        bottleneck.  Also ``elements``, ``samples`` and ``samples_per_s``;
        for an array dataset ``gather``, who gathers its rows: ``"host"``,
        ``"numpy"`` (rows that are not contiguous, or cast, read batch by
        batch with their strides), or ``"batch"`` on a GPU queue whose GPU
        copies the rows of at least one component itself (those of 256 KiB
        or more; the host gathers the rest), or ``"device"`` for a dataset
        held in device memory (``device=True``).

        ``auto``, where a knob is set to ``"auto"`` (``workers="auto"``, the
        queue's ``capacity="auto"``): the current value of each tuned knob
        (``workers``, ``capacity``, ``threads``), ``last_change`` (the last
        decision and its reason, "+2 workers: model waited 40 %, workers
        busy 97 %") and ``history``, every change as ``(t, knob, old, new,
        reason)``; ``theano-queue trace`` shows it over time.

        Without workers, what the Feeder's own thread spent:
        ``thread_cpu_s`` (its processor time, seconds), ``gil_wait_s`` and
        ``gil_waits`` (how long, and how often, the queue's producers waited
        to take the GIL back after their puts' copies), ``gil_wait_share``
        (``gil_wait_s`` over the thread's wall time) and ``gil_bound``
        (that share above one half).  A Feeder over a Python iterable needs
        the GIL once per element, for ``next()``; a training loop that holds
        it makes the Feeder wait.  ``gil_bound`` while the queue's
        ``consumer_wait_s`` grows means the GIL is the limit: an array
        dataset (gathered without the GIL) or ``workers=N`` gets past it.
        """
        stats = self._producer.stats()
        if self._run.port.auto is not None:
            stats["auto"] = self._run.port.auto.as_dict()
        return stats

    @property
    def batches_per_epoch(self) -> Optional[int]:
        """Elements per epoch of a map-style or array dataset (None for an iterable)."""
        sampler = getattr(getattr(self._producer, "schedule", None), "sampler", None)  # a sampled dataset's
        return sampler.batches_per_epoch if sampler is not None else None

    @property
    def planned_elements(self) -> Optional[int]:
        """Elements the whole run puts, where that is known before it runs (else None).

        A list or tuple of batches, or a map-style or array dataset, times ``epochs``.
        """
        if self.epochs is None:
            return None
        if isinstance(self.dataset, (list, tuple)) and self.batches_per_epoch is None:
            return len(self.dataset) * self.epochs
        per_epoch = self.batches_per_epoch
        return None if per_epoch is None else per_epoch * self.epochs


class _Run:
    """One Feeder's run as its thread and producers see it: the name, the count, the failure, and its place in
    the queue's run (a :class:`~theano_queue.core.run.Member` once started).  Holds neither the Feeder nor the Queue."""

    def __init__(self, name: str, port, close_when_done: bool):
        self.name = name
        self.port = port
        self.close_when_done = close_when_done
        self.produced = 0
        self.exception: Optional[BaseException] = None
        self.member: Optional[Member] = None

    def fail(self, exc: BaseException) -> None:
        """The queue fails with ``exc`` (consumers get FeederError once drained); once, and not after a reopen."""
        if self.exception is None:
            self.exception = exc
        if self.member is not None:
            self.member.fail(exc)

    def finish(self, exhausted: bool) -> None:
        """The thread ends: leave the queue's run (closing the queue when this was its last Feeder)."""
        if self.member is not None:  # always, for a thread that runs: start() attaches first
            self.member.finish(exhausted, self.close_when_done)


def _thread_main(run: _Run, producer, stop) -> None:
    exhausted = False
    try:
        getattr(producer, "enter_thread", lambda: None)()  # worker dispatchers keep no thread clock
        exhausted = _produce(run, producer, stop)
    finally:
        try:
            run.finish(exhausted)  # the consumer is told first (the queue closed when this was the last Feeder)
        finally:
            producer.shutdown()  # then the worker processes stop: nothing of theirs is in the queue's slots now


def _produce(run: _Run, producer, stop) -> bool:
    """Runs the producer; True when its source ended.  What goes wrong fails the queue."""
    try:
        return producer.run(stop)
    except SourceFailed as failed:  # anything the source raises reaches the consumer,
        run.fail(failed.__cause__ or failed)  # QueueClosed from a source that reads another queue too
    except QueueClosed:
        pass  # our put found the queue closed under us: the consumer is done
    except BaseException as exc:  # a bad element, a worker's failure, bucket_by
        run.fail(exc)
    return False
