"""How long a Feeder's workers take on their items, and what they are doing, in words.

:class:`ItemWatch` watches the clock on each item in a worker's hands
(``Feeder(timeout=...)``; one warning past :data:`SLOW_SAMPLE_S` without
it) and describes the workers for messages and stall warnings.  Their
start-up has its own clock: :mod:`.startup`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, List, Optional, Tuple

import numpy as np

from . import protocol as p
from .rows import sample_failed

logger = logging.getLogger("theano_queue")

#: With no ``Feeder(timeout=...)``, one warning once a worker has spent this long on one item.
SLOW_SAMPLE_S = 30.0


class ItemWatch:
    """Watches the clock on the items in the workers' hands, and puts the workers' work and start-up in words.

    ``current`` is the pool's shared array of the sample each worker is on;
    ``sampler`` the map-style dataset's (None for an iterable).
    """

    def __init__(self, name: str, timeout: Optional[float], mode: str, sampler: Any, current: Any, start_method: str):
        self.name, self.timeout, self.mode, self.sampler = name, timeout, mode, sampler
        self.current, self.start_method = current, start_method
        self.warned_slow = False

    def check(self, workers: List[Any], now: float) -> List[Tuple[BaseException, int]]:
        """Feeder(timeout=...) per item: (failure, the batch seq it spoils) of each worker past it; one warning
        for an item slower than SLOW_SAMPLE_S without it."""
        failures: List[Tuple[BaseException, int]] = []
        for w in workers:
            if not w.alive or not w.items or w.since is None:
                continue
            spent = now - w.since
            if self.timeout is not None and spent > self.timeout:
                item = next(iter(w.items.values()))
                exc = sample_failed(
                    "worker %d (pid %d) did not finish %s within the Feeder's timeout=%g s"
                    % (w.id, w.pid, self.describe(item, self.current[w.id]), self.timeout),
                    worker=w.id,
                )
                w.since = None
                failures.append((exc, item.batch.seq))
            elif self.timeout is None and spent > SLOW_SAMPLE_S and not self.warned_slow:
                self.warned_slow = True
                logger.warning(
                    "%s: worker %d (pid %d) has taken over %g s on %s; give Feeder(timeout=...) to make "
                    "a hung sample an error",
                    self.name,
                    w.id,
                    w.pid,
                    SLOW_SAMPLE_S,
                    self.describe(next(iter(w.items.values()))),
                )
        return failures

    def phase_of(self, w) -> str:
        """What a starting worker does, in words."""
        if w.phase == p.IMPORTING and self.start_method == "fork":
            return "starting"
        return p.PHASES[w.phase]

    def describe(self, item, current=None) -> str:
        """The samples of ``item`` in words; ``current``, the one its worker is on, first when it is one of them."""
        if self.mode == "map":
            _, _, _, row0, rows = p.MAP_ITEM.unpack_from(item.message)
            indices = np.frombuffer(item.message, np.int64, rows, p.MAP_ITEM.size)
            where = "batch %d of epoch %d" % (
                item.batch.key % self.sampler.batches_per_epoch,
                self.sampler.epoch_of(item.batch.key),
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

    def activity(self, workers: List[Any], n: int, produced: int, last_commit: Optional[float]) -> str:
        """Where the workers are: starting (how many ready, what the others do) or producing (the last put)."""
        now = time.monotonic()
        ready = sum(1 for w in workers if w.ready_at is not None)
        if len(workers) < n or ready < n:
            starting = [
                "worker %d %s for %.0f s" % (w.id, self.phase_of(w), now - w.started_at)
                for w in workers
                if w.alive and w.ready_at is None
            ]
            return "workers starting, %d of %d ready%s" % (
                ready,
                n,
                " (%s)" % ", ".join(starting) if starting else "",
            )
        last = "the last %.1f s ago" % (now - last_commit) if last_commit is not None else "none yet"
        busy = [
            "worker %d on %s for %.0f s"
            % (w.id, self.describe(next(iter(w.items.values())), self.current[w.id]), now - w.since)
            for w in workers
            if w.alive and w.items and w.since is not None
        ]
        return "%d of %d workers ready, %d element(s) put (%s)%s" % (
            ready,
            n,
            produced,
            last,
            "; " + ", ".join(busy) if busy else "",
        )
