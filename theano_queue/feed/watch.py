"""How long a Feeder's workers take, and what they are doing: the timeouts, the slow warnings, the words.

:class:`WorkerWatch` is the part of :class:`~.dispatcher.WorkerProducer` that
watches the clock (``Feeder(timeout=...)`` on each item and on each worker's
start-up, one warning past :data:`SLOW_SAMPLE_S` without it) and describes
the workers for messages and stall warnings.  A starting worker counts as
making progress while it begins a new phase (protocol.PHASES) or uses
processor time: a long import is not a hang, a stopped process or a blocked
unpickle is.
"""

from __future__ import annotations

import logging
import time
from typing import Any, List, Optional

import numpy as np

from . import protocol as p
from .rows import sample_failed

logger = logging.getLogger("theano_queue")

#: With no ``Feeder(timeout=...)``, one warning once a worker has spent this long on one item.
SLOW_SAMPLE_S = 30.0


class WorkerWatch:
    """Mixed into WorkerProducer: uses its workers, pool, sampler, mode, timeout, feeder and _fail_later."""

    # What WorkerProducer sets (declared for the type checker).
    feeder: Any
    pool: Any
    workers: List[Any]
    n: int
    last_commit: Optional[float]

    def _watch_time(self):
        """Feeder(timeout=...) per item, and one warning for an item slower than SLOW_SAMPLE_S."""
        now = time.monotonic()
        failure = self.startup.check(self.workers, now)
        if failure is not None:
            self._fail_later(failure, self.seq)
        for w in self.workers:
            if not w.alive or not w.items or w.since is None:
                continue
            spent = now - w.since
            if self.timeout is not None and spent > self.timeout:
                item = next(iter(w.items.values()))
                exc = sample_failed(
                    "worker %d (pid %d) did not finish %s within the Feeder's timeout=%g s"
                    % (w.id, w.pid, self._describe(item, self.pool.current[w.id]), self.timeout),
                    worker=w.id,
                )
                w.since = None
                self._fail_later(exc, item.batch.seq)
            elif self.timeout is None and spent > SLOW_SAMPLE_S and not self.warned_slow:
                self.warned_slow = True
                logger.warning(
                    "%s: worker %d (pid %d) has taken over %g s on %s; give Feeder(timeout=...) to make "
                    "a hung sample an error",
                    self.feeder.name,
                    w.id,
                    w.pid,
                    SLOW_SAMPLE_S,
                    self._describe(next(iter(w.items.values()))),
                )

    def _phase(self, w):
        if w.phase == p.IMPORTING and self.context.get_start_method() == "fork":
            return "starting"
        return p.PHASES[w.phase]

    def _describe(self, item, current=None):
        """The samples of ``item`` in words; ``current``, the one its worker is on, first when it is one of them."""
        if self.mode == "map":
            _, _, _, row0, rows = p.MAP_ITEM.unpack_from(item.message)
            indices = np.frombuffer(item.message, np.int64, rows, p.MAP_ITEM.size)
            where = "batch %d of epoch %d" % (
                item.batch.key % self.schedule.sampler.batches_per_epoch,
                self.schedule.sampler.epoch_of(item.batch.key),
            )
            listed = indices.tolist() if rows <= 8 else "[%s, ... %d]" % (str(indices[:3].tolist())[1:-1], indices[-1])
            if current is not None and current in indices:
                done = int(np.flatnonzero(indices == current)[0])
                return "sample %d (%d of its %d sample(s) %s of %s done before it)" % (
                    current,
                    done,
                    rows,
                    listed,
                    where,
                )
            return "sample%s %s of %s" % ("s" if rows > 1 else "", listed, where)
        return "element %d of its stream" % item.batch.key[1]

    def activity(self) -> str:
        """Where the workers are: starting (how many ready, what the others do) or producing (the last put)."""
        now = time.monotonic()
        ready = sum(1 for w in self.workers if w.ready_at is not None)
        if len(self.workers) < self.n or ready < self.n:
            starting = [
                "worker %d %s for %.0f s" % (w.id, self._phase(w), now - w.started_at)
                for w in self.workers
                if w.alive and w.ready_at is None
            ]
            return "workers starting, %d of %d ready%s" % (
                ready,
                self.n,
                " (%s)" % ", ".join(starting) if starting else "",
            )
        last = "the last %.1f s ago" % (now - self.last_commit) if self.last_commit is not None else "none yet"
        busy = [
            "worker %d on %s for %.0f s"
            % (w.id, self._describe(next(iter(w.items.values())), self.pool.current[w.id]), now - w.since)
            for w in self.workers
            if w.alive and w.items and w.since is not None
        ]
        return "%d of %d workers ready, %d element(s) put (%s)%s" % (
            ready,
            self.n,
            self.feeder.produced,
            last,
            "; " + ", ".join(busy) if busy else "",
        )
