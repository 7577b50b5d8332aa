"""``Feeder(workers="auto")``: how many worker processes, decided from what the run measures.

The run starts with :data:`START_WORKERS`.  Every :data:`PERIOD_S` the
:class:`WorkerTuner` measures the share of the time the model waited for
input (the queue's ``consumer_wait_s``) and the share the workers were busy
on samples, and :class:`WorkerRule` (pure: measures in, count and reason
out) decides:

* the model waits and the workers are busy: as many workers as would keep
  it fed were they the only bottleneck (a model that waits a share ``w`` of
  the time is fed ``1 - w`` of what it asks, so ``count / (1 - w)``), at
  least one more and at most twice as many, up to the limit: the cores,
  ``max_workers`` and ``memory_budget`` over one worker's resident memory;
* the model does not wait and the workers idle: one worker fewer (it
  finishes what it holds, then stops);
* otherwise: as it is.

The workers only write the rows they are handed: which samples make which
batch is the sampler's, so the same seed gives the same batches whatever the
count, and ``state_dict()`` stays exact across a change.  Each change goes to
the Feeder's :class:`~.autotune.AutoLog` (knob ``"workers"``), shown by
``feeder.stats()["auto"]``.
"""

from __future__ import annotations

import math
import os
from typing import Optional, Tuple

from .autotune import AutoLog

#: Workers a ``workers="auto"`` run starts with (fewer where the limit is lower): two, because a decode that
#: needs workers at all rarely keeps up with one, and each added worker costs a period and a start-up.
START_WORKERS = 2
#: Seconds between two decisions.
PERIOD_S = 1.0
#: More workers while the model waits at least this share of the time and the workers are busy this share.
MODEL_WAITS = 0.05
WORKERS_BUSY = 0.80
#: One worker fewer while the model waits less than this share and the workers are busy less than this one.
MODEL_FED = 0.02
WORKERS_IDLE = 0.50


def words(model_wait: float, busy: float) -> str:
    return "model waited %.0f %%, workers busy %.0f %%" % (100 * model_wait, 100 * busy)


def wanted(count: int, model_wait: float) -> int:
    """The workers that would feed a model that waits ``model_wait`` of the time with ``count``: ``count / (1 -
    model_wait)``, at least one more (the wait may be the start of a burst) and at most twice as many (the
    workers may not be the only bottleneck: the next period measures again)."""
    share_fed = max(1.0 - model_wait, 1e-9)
    return max(count + 1, min(2 * count, math.ceil(count / share_fed - 1e-9)))


class WorkerRule:
    """The decision, pure: from the model's wait share, the workers' busy share, the count and its limit, the
    new count and why (in the words of the monitor)."""

    def __init__(self, least: int = 1):
        self.least = least

    def decide(self, model_wait: float, busy: float, count: int, limit: int, why_limit: str = "") -> Tuple[int, str]:
        said = words(model_wait, busy)
        if model_wait >= MODEL_WAITS and busy >= WORKERS_BUSY:
            if count >= limit:
                return count, "%s; at the limit of %d worker(s)%s" % (said, limit, why_limit)
            return min(limit, wanted(count, model_wait)), said
        if model_wait < MODEL_FED and busy < WORKERS_IDLE and count > self.least:
            return count - 1, said
        return count, said


def worker_limit(cores: int, max_workers: Optional[int], memory_budget: Optional[int], rss: int) -> Tuple[int, str]:
    """The most workers: (count, " (what bounds it)")."""
    bounds = [(max(1, cores), "the cores")]
    if max_workers is not None:
        bounds.append((max_workers, "max_workers"))
    if memory_budget is not None and rss > 0:
        bounds.append((max(1, memory_budget // rss), "memory_budget over %d MiB a worker" % (rss >> 20)))
    limit, why = min(bounds)
    return limit, " (%s)" % why


def resident_bytes(pid: int) -> int:
    """A process's resident memory, from /proc (0 where unreadable)."""
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def available_bytes() -> Optional[int]:
    """MemAvailable from /proc/meminfo (None where unreadable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


class WorkerTuner:
    """Measures each period and asks the rule; records every change in ``log``.

    :meth:`tick` takes cumulative counters (seconds the model waited,
    seconds the workers were busy) and the clock's ``now``: a test drives it
    with a fake clock and synthetic measures.
    """

    def __init__(
        self,
        log: AutoLog,
        max_workers: Optional[int] = None,
        memory_budget: Optional[int] = None,
        cores: Optional[int] = None,
        rule: Optional[WorkerRule] = None,
    ):
        self.log, self.max_workers, self.rule = log, max_workers, rule or WorkerRule()
        self.memory_budget = memory_budget
        self.cores = cores or len(os.sched_getaffinity(0))
        self.last: Optional[Tuple[float, float, float]] = None  # (now, waited, busy) at the last decision

    def start_count(self) -> int:
        """The workers to start with; the first count recorded in the log."""
        count = min(START_WORKERS, self.limit(0)[0])
        self.log.set("workers", count)
        return count

    def limit(self, rss: int) -> Tuple[int, str]:
        return worker_limit(self.cores, self.max_workers, self.memory_budget, rss)

    def due(self, now: float) -> bool:
        """Whether :meth:`tick` would decide (cheap: the dispatcher asks on every turn of its loop)."""
        return self.last is None or now - self.last[0] >= PERIOD_S

    def tick(self, now: float, waited: float, busy: float, count: int, starting: bool, rss) -> Optional[int]:
        """The new count when a decision is due and changes it (recorded in the log); else None.

        ``waited`` and ``busy`` are cumulative seconds (the model's wait for input, the workers' work);
        ``starting``: a worker is still starting (its effect is not measured yet): no decision, the period
        begins again; ``rss()`` one worker's resident bytes (asked only when deciding)."""
        if self.last is None or starting:
            self.last = (now, waited, busy)
            return None
        then, waited0, busy0 = self.last
        elapsed = now - then
        if elapsed < PERIOD_S:
            return None
        self.last = (now, waited, busy)
        model_wait = min(1.0, max(0.0, (waited - waited0) / elapsed))
        busy_share = min(1.0, max(0.0, (busy - busy0) / (elapsed * max(1, count))))
        limit, why = self.limit(rss())
        new, reason = self.rule.decide(model_wait, busy_share, count, limit, why)
        if new == count:
            return None
        self.log.change("workers", new, reason)
        return new
