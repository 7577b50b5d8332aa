"""Feeder: fills a queue from any iterable in a background thread."""
import math
import threading
import warnings

from . import _engine
from .errors import QueueClosed, Stopped
from .monitor import Monitor


class Feeder:
    """Puts every element of ``source`` into ``queue`` from a background thread.

    ::

        with Feeder(q, batches):          # starts; on exit stops and joins
            while True:
                try:
                    f()
                except QueueClosed:       # the source is exhausted and drained
                    break

    ``source`` is any iterable of elements: tuples in component order, dicts
    keyed by component name, or bare arrays for a one-component queue.

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
    """

    def __init__(self, queue, source=None, *, fill=None, close_when_done=True, stop_timeout=10.0, name=None,
                 progress=False):
        if (source is None) == (fill is None):
            raise TypeError("Feeder(%s): give either a source iterable or a fill function" % queue.name)
        self.queue = queue
        self.source = source
        self.fill = fill
        self.close_when_done = close_when_done
        self.stop_timeout = stop_timeout
        self.name = name or "Feeder(%s)" % queue.name
        self.produced = 0
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
                slot.rows = _from_source(self.fill, *slot.arrays)
        except (Stopped, StopIteration):
            return False
        return True

    def _elements(self):
        """Produce until the source ends or stop(); True when the source ended."""
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
