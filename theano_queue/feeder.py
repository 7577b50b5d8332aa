"""Feeder: fills a queue from any iterable in a background thread."""
import threading
import warnings

from .errors import QueueClosed, QueueTimeout
from .monitor import Monitor

# A put blocked on a full queue wakes this often to notice stop().
_STOP_POLL_S = 0.05


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
        self._stop = threading.Event()
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
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        self._monitor = Monitor.for_feeder(self, self.progress).start() if self.progress else None
        return self

    def stop(self):
        """Ask the thread to stop; it does before its next put (within 50 ms if blocked on a full queue)."""
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
        """Put, polling so that stop() is noticed while the queue is full.  False once stopped."""
        while not self._stop.is_set():
            try:
                self.queue.put(element, timeout=_STOP_POLL_S)
                return True
            except QueueTimeout:
                continue
        return False

    def _fill_one(self):
        """Fill the next slot in place.  False once stopped or the fill function is exhausted."""
        while not self._stop.is_set():
            try:
                with self.queue.writer(timeout=_STOP_POLL_S) as slot:
                    slot.rows = self.fill(*slot.arrays)
                return True
            except QueueTimeout:
                continue
            except StopIteration:
                return False
        return False

    def _elements(self):
        """Produce until the source ends or stop(); True when the source ended."""
        if self.fill is not None:
            while self._fill_one():
                self.produced += 1
            return not self._stop.is_set()
        for element in self.source:
            if self._stop.is_set() or not self._put(element):
                return False
            self.produced += 1
        return True

    def _run(self):
        try:
            exhausted = self._elements()
        except QueueClosed:
            return  # closed under us: the consumer is done
        except BaseException as exc:  # anything the source raises reaches the consumer
            self.exception = exc
            self.queue.fail(exc)
            return
        if exhausted and self.close_when_done:
            self.queue.close()
