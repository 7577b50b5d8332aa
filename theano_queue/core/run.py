"""One owner of a queue's run: the Feeders attached to it, its reopen count, and who closes it when.

Each queue's :class:`~theano_queue.core.port.Port` holds one :class:`QueueRun`.  A Feeder joins it with
:meth:`QueueRun.attach` and reports its thread's end and its ``with`` block's through the :class:`Member` it gets
back; the Queue closes and reopens through it.  One lock guards it all, taken when a Feeder starts, ends or
leaves, never per element.  The rules:

* A Feeder's run belongs to the generation (the reopen count) it started in: once the queue is reopened, that
  run may neither close nor fail it, and nothing it makes reaches the queue again.
* The queue closes when the last Feeder of the generation still running is done, once one of them ran out
  (with ``close_when_done``) or left its ``with`` block.
* A Feeder started on a queue that its Feeders closed when they ran out joins the run, as long as no consumer
  has been told that the queue is closed and drained: Feeders started one after the other for one epoch feed
  it whatever their timing.
* :meth:`QueueRun.reopen` ends the run: Feeders still running are stopped and waited for, and what the queue
  holds is dropped with them (as when a ``with`` block was left); what a run that ended on its own left is
  refused, never carried into the next epoch.
"""

import threading
import weakref

from .errors import QueueClosed, QueueError


class Member:
    """One Feeder's place in its queue's run, from its start until its thread ends.

    The Feeder's thread reports through :meth:`fail` and :meth:`finish`, its ``with`` block through
    :meth:`leave`.  The Feeder itself is held weakly: a Feeder and a Queue the user dropped are collected.
    """

    def __init__(self, run, name, generation, stop, thread, stop_timeout, owner):
        self.name = name
        self.generation = generation
        self._run = run
        self._stop, self._thread, self._stop_timeout = stop, thread, stop_timeout
        self._owner = weakref.ref(owner) if owner is not None else lambda: None
        self.left = self.failed = self.done = False
        self.others: list = []  # the Members attached to the queue at the same time as this one

    def owner(self):
        """The Feeder, while the user still holds it; else None."""
        return self._owner()

    def fail(self, exc: BaseException) -> None:
        """The run failed with ``exc``: the queue fails (consumers get FeederError once drained), unless reopened."""
        self._run._fail(self, exc)

    def finish(self, exhausted: bool, close_when_done: bool) -> None:
        """The thread ends (``exhausted``: its source ran out)."""
        self._run._finish(self, exhausted and close_when_done)

    def leave(self, close_when_done: bool) -> None:
        """The Feeder's ``with`` block was left, its thread stopped: the epoch ends for the next reopen."""
        self._run._leave(self, close_when_done)

    def withdraw(self) -> None:
        """The Feeder could not start after all: as if it had never attached."""
        self._run._withdraw(self)

    def others_named(self) -> list:
        """The other Feeders that fed the queue during this run, by name; never this one."""
        names = sorted({m.name for m in self.others if m.name != self.name})
        if any(m.name == self.name for m in self.others):
            names.append("another Feeder named %r" % self.name)
        return names

    def activity(self) -> str:
        feeder = self.owner()
        return feeder.activity() if feeder is not None else "running"

    def _stopped(self) -> bool:
        """Stops the thread and waits ``stop_timeout`` for it; True once it has ended (or never started)."""
        self._stop.set()
        if self._thread.ident is None:
            return True  # its start() is still on its way: the stop is set, it will put nothing
        timeout = self._stop_timeout
        self._thread.join(None if timeout >= threading.TIMEOUT_MAX else timeout)
        return not self._thread.is_alive()


class QueueRun:
    """The run of one queue (see the module's rules)."""

    def __init__(self, name, ring):
        self.name = name
        self._ring = ring
        self._lock = threading.Lock()
        self._members: list = []  # whose threads have not ended, of any generation
        self._generation = 0
        self._close_when_last = False  # a Feeder ran out or was left: the last one still running closes
        self._epoch_left = False  # a with block of this generation was left: reopen drops what is queued
        self._fed = False  # a Feeder attached during this generation
        self._ran_out = False  # the Feeders closed the queue when they ran out: the next one may resume it
        self._named = 0

    @property
    def generation(self) -> int:
        """Reopens so far."""
        return self._generation

    def feeder_name(self) -> str:
        """A default name, one of its own per queue: ``Feeder(q)``, then ``Feeder(q)#2``, ..."""
        with self._lock:
            self._named += 1
            number = self._named
        return "Feeder(%s)" % self.name if number == 1 else "Feeder(%s)#%d" % (self.name, number)

    def attached(self) -> list:
        """The Members of this generation still running, and not left by their with block."""
        with self._lock:
            return [m for m in self._members if self._active(m)]

    def attach(self, name, stop, thread, stop_timeout, owner=None) -> Member:
        """A Feeder joins the run before its thread starts.  ``stop`` (``set()``) and ``thread`` (``join``) are
        how a reopen stops it and waits for it.  Raises QueueClosed on a queue whose epoch has ended."""
        with self._lock:
            if self._ring.closed:
                if not (self._ran_out and self._ring.resume()):
                    raise QueueClosed(
                        "%s: queue '%s' is closed (the last epoch ended it); call q.reopen() before starting the "
                        "next epoch's Feeder" % (name, self.name)
                    )
                # No consumer has seen the end the Feeders' running out made: this Feeder joins their epoch.
                self._ran_out, self._close_when_last = False, True
            member = Member(self, name, self._generation, stop, thread, stop_timeout, owner)
            for other in self._members:
                if self._active(other):
                    other.others.append(member)
                    member.others.append(other)
            self._members.append(member)
            self._fed = True
            return member

    def close(self, cancel_pending: bool = False) -> None:
        """Queue.close: the user ends the epoch; no Feeder joins it again before a reopen."""
        with self._lock:
            self._ran_out = False
            self._ring.close(cancel_pending)

    def reopen(self) -> None:
        """Queue.reopen (see the module's rules)."""
        with self._lock:
            running = [m for m in self._members if not m.left]
            if not (running or self._epoch_left):
                if self._fed and not self._ring.closed and self._ring.size():
                    raise QueueError(
                        "Queue.reopen: queue %r: still holds %d element(s) of this epoch's Feeders; take them, or "
                        "drop them with q.close(cancel_pending=True), first" % (self.name, self._ring.size())
                    )
                self._ring.reopen()  # a closed queue: refused while elements put by hand are left
                self._next_generation()
                return
            self._next_generation()  # from here on the runs still going can neither close nor fail the queue
            self._ring.close(cancel_pending=True)  # wakes their puts and drops what they queued
        stuck = ["%s (stop_timeout=%g s)" % (m.name, m._stop_timeout) for m in running if not m._stopped()]
        if stuck:
            raise QueueError(
                "Queue.reopen: queue %r: cannot reopen while %s still runs: it did not stop in time (its source "
                "is blocked inside next(), __getitem__ or fill). The queue stays closed and nothing of that run "
                "can reach it; make the source return, then call q.reopen() again" % (self.name, " and ".join(stuck))
            )
        self._ring.reopen()

    # ---- what Members report (under the lock) ---------------------------------------------------------

    def _next_generation(self):
        self._generation += 1
        self._close_when_last = self._epoch_left = self._fed = self._ran_out = False

    def _active(self, member) -> bool:
        return member.generation == self._generation and not (member.left or member.done)

    def _current(self, member) -> bool:
        return member.generation == self._generation and not member.failed

    def _close_if_last(self) -> None:
        if self._close_when_last and not any(self._active(m) for m in self._members):
            self._close_when_last = False
            if not self._ring.closed:
                self._ring.close()
                self._ran_out = not self._epoch_left

    def _fail(self, member, exc) -> None:
        with self._lock:
            if self._current(member):
                member.failed = True
                self._ran_out = False
                self._ring.fail(exc)

    def _finish(self, member, ran_out) -> None:
        with self._lock:
            member.done = True
            if member in self._members:
                self._members.remove(member)
            if self._current(member):
                self._close_when_last = self._close_when_last or ran_out
                self._close_if_last()

    def _leave(self, member, close_when_done) -> None:
        with self._lock:
            member.left = True
            if member.generation != self._generation:
                return
            self._epoch_left = True
            self._ran_out = False  # the user ended this epoch: the next Feeder waits for a reopen
            self._close_when_last = self._close_when_last or close_when_done
            self._close_if_last()

    def _withdraw(self, member) -> None:
        with self._lock:
            for other in member.others:
                if member in other.others:
                    other.others.remove(member)
        self._finish(member, False)
