"""A Feeder's workers while they start: bounded whatever they do, and reported every few seconds.

Each starting worker has two bounds:

* *no progress* (no start-up phase begun, no processor time used) for
  ``Feeder(timeout=...)`` seconds, or :data:`STARTUP_IDLE_S` without it: a
  stopped process or a blocked unpickle;
* *still starting* after ``Feeder(startup_timeout=...)`` seconds (default
  :data:`STARTUP_TIMEOUT_S`), busy or not: a ``__setstate__`` that spins
  uses processor time for ever, and processor time is no progress past this
  bound.

Until then, every :data:`STARTUP_REPORT_S` seconds one warning on the
``theano_queue`` logger names the workers still starting and their phase.
A worker past a bound fails the whole Feeder (its :class:`FeederError`
names the worker, its pid and its phase): its share of the work is never
left to the others.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterable, Optional

import numpy as np

from .pool import PROCESS_STATES, process_status
from .rows import sample_failed

logger = logging.getLogger("theano_queue")

#: Default of ``Feeder(startup_timeout=...)``: seconds a worker may take to start, whatever it does meanwhile.
STARTUP_TIMEOUT_S = 120.0
#: Without ``Feeder(timeout=...)``, a starting worker that shows no progress this long has failed.
STARTUP_IDLE_S = 120.0
#: Seconds between two warnings naming the workers still starting.
STARTUP_REPORT_S = 10.0


def check_startup_timeout(value: Any, where: str) -> float:
    """``Feeder(startup_timeout=...)``: a number of seconds > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value > 0:
        raise ValueError(
            "%s: startup_timeout must be a number of seconds > 0 (the most a worker may take to start), got %r"
            % (where, value)
        )
    return float(value)


class StartupWatch:
    """Bounds and reports the start-up of a Feeder's workers; :meth:`check` is called by the dispatcher's loop.

    ``phase_of(worker)`` says in words what a worker does (protocol.PHASES).
    """

    def __init__(self, name: str, timeout: Optional[float], startup_timeout: float, phase_of: Callable[[Any], str]):
        self.name, self.timeout, self.startup_timeout = name, timeout, startup_timeout
        self.phase_of = phase_of
        self.next_report: Optional[float] = None

    def check(self, workers: Iterable[Any], now: float):
        """The failure of the first starting worker past a bound (None if none is); warns when a report is due."""
        starting = [w for w in workers if w.alive and w.ready_at is None]
        for w in starting:
            ticks, state = process_status(w.pid)
            if ticks != w.cpu_ticks or state == "R":  # runnable counts too: on a loaded machine it waits for a core
                w.cpu_ticks, w.progress_at = ticks, now
            failure = self.bound(w, now, state)
            if failure is not None:
                w.started_at = w.progress_at = math.inf  # one failure per worker
                return failure
        if not starting:
            self.next_report = None
            return None
        if self.next_report is None:
            self.next_report = min(w.started_at for w in starting) + STARTUP_REPORT_S
        if now >= self.next_report:
            self.next_report = now + STARTUP_REPORT_S
            self.report(starting, now)
        return None

    def bound(self, w, now: float, state: str):
        idle_limit = min(self.timeout if self.timeout is not None else STARTUP_IDLE_S, self.startup_timeout)
        idle, spent = now - w.progress_at, now - w.started_at
        if idle > idle_limit:
            why = "showed no progress for %.1f s (%s, no processor time used)" % (
                idle,
                PROCESS_STATES.get(state, "state %r" % state),
            )
            if self.timeout is not None and idle_limit == self.timeout:
                bound = "timeout=%g s" % self.timeout
            elif idle_limit == self.startup_timeout:
                bound = "startup_timeout=%g s" % self.startup_timeout
            else:
                bound = "start-up limit of %g s" % idle_limit
        elif spent > self.startup_timeout:
            why = "was still starting after %.0f s, %s" % (
                spent,
                "using processor time" if idle < 1.0 else PROCESS_STATES.get(state, "state %r" % state),
            )
            bound = "startup_timeout=%g s" % self.startup_timeout
        else:
            return None
        return sample_failed(
            "worker %d (pid %d) did not start within the Feeder's %s: it %s while %s"
            % (w.id, w.pid, bound, why, self.phase_of(w)),
            worker=w.id,
        )

    def report(self, starting, now: float) -> None:
        logger.warning(
            "%s: still starting: %s; a worker not ready after startup_timeout=%g s fails the Feeder",
            self.name,
            "; ".join(
                "worker %d (pid %d) %s for %.0f s (%s)"
                % (
                    w.id,
                    w.pid,
                    self.phase_of(w),
                    now - w.started_at,
                    "using processor time" if now - w.progress_at < 1.0 else "idle %.0f s" % (now - w.progress_at),
                )
                for w in starting
            ),
            self.startup_timeout,
        )
