"""``Queue(capacity="auto")``: the ring's depth and the copy pool's threads follow what the queue measures.

How the ring grows without moving: the queue allocates the most slots its
byte budget allows (:func:`auto_slots`; on a GPU the device's free memory is
part of the budget) and the engine limits how many of them producers may
hold at once, the ring's *depth* (``Ring.depth``, c_code/engine/tq_ring.c).
Growing raises the limit, shrinking lowers it (producers then wait until
consumers bring the ring under it): no element is moved, dropped or
reordered, and memory never passes the budget.  ``q.capacity`` and
``q.stats()["capacity"]`` say the depth in force, ``stats()["slots"]``
the slots allocated.

Two rules decide, each a small pure class fed with one window of measures
(:class:`Window`), so that tests drive them with made-up figures:

* :class:`CapacityRule`: grow (double) while the model waits *and*
  producers found the ring full in the same window: they outran the model
  in bursts, and a deeper ring keeps what they made ahead.  Producers busy
  all the time are not grown for (the monitor's verdict: more workers, not
  more slots).  A growth that
  does not cut the model's wait is undone and the depth capped there (busy
  workers hold every slot too; more of them, not more slots, is their
  fix).  Shrink by one while the ring is always full and the model never
  waits; a shrink after which the model waits is undone and the depth
  floored there.  Worker processes get at least one slot each being written, one
  lent to the model and one ready (workers + 2): below that they wait for
  each other, not for the model.
* :class:`ThreadsRule`: the copy pool's threads follow an array dataset's
  gather time against the step.  A gather that takes the whole step while
  the model waits gets one more thread (up to the cores), kept only if the
  gather's time per element falls; a gather that takes under half the step
  while the model does not wait gives one back.  The copy pool is the
  process's (``_engine.set_copy_threads``): the last tuned queue sets it.

:class:`AutoCapacity` is the driver: one daemon thread per auto queue,
reading ``Ring.stats()`` and the attached Feeders' ``stats()`` once a
``interval``, and recording every change in the queue's
:class:`~theano_queue.feed.autotune.AutoLog`.  A queue with a fixed capacity
has none: auto costs nothing unless asked for.
"""

from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from .. import _engine
from ..tools.monitor import COMPUTE_BOUND, INPUT_BOUND, PRODUCERS_BUSY

#: The fewest and the most slots an auto queue allocates, and the depth it starts at.
AUTO_FEWEST_SLOTS, AUTO_MOST_SLOTS, AUTO_START_DEPTH = 2, 16, 2
#: The host bytes an auto ring may take by default: this share of the machine's memory, at most AUTO_BUDGET_CAP.
AUTO_BUDGET_SHARE, AUTO_BUDGET_CAP = 1 / 8, 1 << 30
#: The share of the GPU's free memory an auto ring's device slots may take.
AUTO_DEVICE_SHARE = 1 / 4
#: Producers that waited for a slot at least this share of a window found the ring full in it (a burst).
BURST = 0.05
#: A change must cut the model's wait (or the gather's time) to this share of before to be kept.
KEPT_BELOW = 0.8


def auto_slots(
    slot_bytes: int, host_bytes: int, budget: Optional[int] = None, device_free: Optional[int] = None
) -> Tuple[int, int]:
    """(slots, budget in bytes) of a ``capacity="auto"`` ring: as many slots as fit the budget, from
    :data:`AUTO_FEWEST_SLOTS` to :data:`AUTO_MOST_SLOTS`.

    ``budget`` (bytes) defaults to :data:`AUTO_BUDGET_SHARE` of ``host_bytes``, at most
    :data:`AUTO_BUDGET_CAP`; ``device_free`` (a GPU queue's free device memory) caps it at
    :data:`AUTO_DEVICE_SHARE` of that.  A budget under two slots still gets two: a queue needs them to overlap
    a put with a get; the queue's own check refuses what does not fit the memory at all.
    """
    if budget is None:
        budget = min(int(host_bytes * AUTO_BUDGET_SHARE), AUTO_BUDGET_CAP)
    if device_free is not None:
        budget = min(budget, int(device_free * AUTO_DEVICE_SHARE))
    fit = budget // max(int(slot_bytes), 1)
    return max(AUTO_FEWEST_SLOTS, min(AUTO_MOST_SLOTS, fit)), int(budget)


@dataclass(frozen=True)
class Window:
    """What the queue measured over one span: all shares are of its ``seconds``.

    ``model_waited``: consumers waiting for an element; ``ring_full``: producers
    waiting for a free slot; ``mean_fill``: elements ready on average;
    ``gather_busy``: an array dataset's Feeder gathering rows (None without one);
    ``producers_busy``: the attached Feeders' ``stats()["busy"]`` (their
    workers' or thread's share since they started), the most of them, or None;
    ``workers``: the attached Feeders' worker processes now, or None without any.
    """

    seconds: float
    elements: int
    model_waited: float
    ring_full: float
    mean_fill: float
    gather_busy: Optional[float] = None
    producers_busy: Optional[float] = None
    workers: Optional[int] = None

    @classmethod
    def between(cls, a: dict, b: dict) -> "Window":
        """The window between two snapshots: ``Ring.stats()`` dicts with ``gather_busy_s`` (None: no gather)."""
        seconds = max(b["clock_s"] - a["clock_s"], 1e-9)
        gather = None
        if a.get("gather_busy_s") is not None and b.get("gather_busy_s") is not None:
            gather = (b["gather_busy_s"] - a["gather_busy_s"]) / seconds
        return cls(
            seconds=seconds,
            elements=b["dequeued"] - a["dequeued"],
            model_waited=(b["consumer_wait_s"] - a["consumer_wait_s"]) / seconds,
            ring_full=(b["producer_wait_s"] - a["producer_wait_s"]) / seconds,
            mean_fill=(b["fill_integral"] - a["fill_integral"]) / seconds,
            gather_busy=gather,
            producers_busy=b.get("producers_busy"),
            workers=b.get("workers"),
        )


Decision = Optional[Tuple[int, str]]


def pct(share: float) -> str:
    return "%.0f%%" % (100 * share)


class CapacityRule:
    """The ring's depth, from :class:`Window` to :class:`Window`: ``decide(depth, window)`` -> (new, reason) or
    None.  Hill-climbing with memory: a change that did not help is undone and not tried again."""

    def __init__(self, slots: int, lowest: int = AUTO_FEWEST_SLOTS):
        self.lowest, self.highest = min(lowest, slots), slots
        self.trial: Optional[Tuple[str, int, float]] = None  # (grow/shrink, depth before, model wait before)

    def decide(self, depth: int, w: Window) -> Decision:
        if w.elements == 0:
            return None  # nothing was taken: nothing says what the model needs
        trial, self.trial = self.trial, None
        if trial is not None:
            undone = self.judge(trial, depth, w)
            if undone is not None:
                return undone
        need = self.slots_for_workers(w)
        if depth < need:
            return need, "%d workers write an element each, one is lent, one waits ready: depth %d" % (
                w.workers or 0,
                need,
            )
        flat_out = w.producers_busy is not None and w.producers_busy >= PRODUCERS_BUSY
        if w.model_waited >= INPUT_BOUND and w.ring_full >= BURST and depth < self.highest and not flat_out:
            self.trial = ("grow", depth, w.model_waited)
            new = min(self.highest, 2 * depth)
            return new, "model waited %s, ring full %s: producers ran ahead in bursts" % (
                pct(w.model_waited),
                pct(w.ring_full),
            )
        if w.model_waited < COMPUTE_BOUND and w.mean_fill >= depth - 0.5 and depth > max(self.lowest, need):
            self.trial = ("shrink", depth, w.model_waited)
            return depth - 1, "ring always full (fill %.1f/%d), model waited %s" % (
                w.mean_fill,
                depth,
                pct(w.model_waited),
            )
        return None

    def slots_for_workers(self, w: Window) -> int:
        """The depth below which workers wait for each other, not for the model: one slot each being written,
        one lent to the model, one ready (as DataLoader keeps batches ahead per worker); within the slots."""
        return min(self.highest, w.workers + 2) if w.workers else 0

    def judge(self, trial, depth: int, w: Window) -> Decision:
        """The window after a change: undo it where it did not help, and remember the bound."""
        kind, before, waited_before = trial
        if kind == "grow" and w.model_waited > KEPT_BELOW * waited_before:
            self.highest = before
            return before, "no gain: model waited %s at %d, %s at %d" % (
                pct(w.model_waited),
                depth,
                pct(waited_before),
                before,
            )
        if kind == "shrink" and w.model_waited >= INPUT_BOUND:
            self.lowest = before
            return before, "model waited %s at %d" % (pct(w.model_waited), depth)
        return None


class ThreadsRule:
    """The copy pool's threads, from an array dataset's gather time against the step: ``decide(threads,
    window)`` -> (new, reason) or None.  The gather's share of the window is its time per element over the
    step's (the window's seconds per element)."""

    def __init__(self, most: int, fewest: int = 1):
        self.fewest, self.most = fewest, max(most, fewest)
        self.trial: Optional[Tuple[int, float]] = None  # (threads before, gather per element before)

    def decide(self, threads: int, w: Window) -> Decision:
        if w.gather_busy is None or w.elements == 0:
            return None
        per_element = w.gather_busy * w.seconds / w.elements
        trial, self.trial = self.trial, None
        if trial is not None:
            before, per_element_before = trial
            if threads > before and per_element > KEPT_BELOW * per_element_before:
                self.most = before
                return before, "no gain: gather %.3g ms an element with %d, %.3g ms with %d" % (
                    1e3 * per_element,
                    threads,
                    1e3 * per_element_before,
                    before,
                )
        if w.model_waited >= INPUT_BOUND and w.gather_busy >= PRODUCERS_BUSY and threads < self.most:
            self.trial = (threads, per_element)
            return threads + 1, "gather took %s of the step, model waited %s" % (
                pct(w.gather_busy),
                pct(w.model_waited),
            )
        if w.model_waited < COMPUTE_BOUND and w.gather_busy < 0.5 and threads > self.fewest:
            return threads - 1, "gather took %s of the step, model waited %s" % (
                pct(w.gather_busy),
                pct(w.model_waited),
            )
        return None


class AutoCapacity:
    """The thread that tunes an auto queue: every ``interval`` seconds, one :class:`Window`, both rules, the
    changes applied and logged.  Holds the queue's port weakly: it ends once the queue and its Feeders are gone,
    or at :meth:`stop`.  ``sleep`` (an Event's wait, by default) is injectable for tests, as the log's clock is."""

    def __init__(self, port, slots: int, interval: float = 1.0, threads_most: Optional[int] = None):
        self.port = weakref.ref(port)
        self.name = port.name
        self.interval = float(interval)
        self.log = port.auto_log()
        self.capacity = CapacityRule(slots)
        self.threads = ThreadsRule(threads_most or os.cpu_count() or 1)
        self.log.set("capacity", port.ring.depth)
        self.tuning_threads = False  # set once a gather is seen: only then are the pool's threads the queue's
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "AutoCapacity":
        self._thread = threading.Thread(target=self.run, name="AutoCapacity(%s)" % self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def run(self, wait: Optional[Callable[[float], bool]] = None) -> None:
        wait = wait or self._stop.wait
        before = self.snapshot()
        while before is not None and not wait(self.interval):
            now = self.snapshot()
            if now is None:
                return
            self.step(Window.between(before, now))
            before = now

    def snapshot(self) -> Optional[dict]:
        """The ring's stats with the attached array Feeders' gather seconds; None once the queue is gone."""
        port = self.port()
        if port is None:
            return None
        try:
            stats = dict(port.ring.stats())
        except Exception:  # the queue was collected and its ring closed under us
            return None
        feeders = [s for s in (_stats(m.owner()) for m in port.run.attached()) if s]
        gathers = [s for s in feeders if "gather" in s]
        stats["gather_busy_s"] = sum(s.get("busy_s", 0.0) for s in gathers) if gathers else None
        busy = [s["busy"] for s in feeders if isinstance(s.get("busy"), float)]
        stats["producers_busy"] = max(busy) if busy else None
        workers = [s["workers"] for s in feeders if isinstance(s.get("workers"), int) and s["workers"] > 0]
        stats["workers"] = sum(workers) if workers else None
        return stats

    def step(self, w: Window) -> None:
        """Both rules on one window; their changes applied and logged."""
        port = self.port()
        if port is None:
            return
        depth = port.ring.depth
        decided = self.capacity.decide(depth, w)
        if decided is not None and decided[0] != depth:
            port.ring.depth = decided[0]
            self.log.change("capacity", decided[0], decided[1])
        if w.gather_busy is not None:
            threads = _engine.copy_threads()
            if not self.tuning_threads:
                self.tuning_threads = True
                self.log.set("threads", threads)
            decided = self.threads.decide(threads, w)
            if decided is not None and decided[0] != threads:
                _engine.set_copy_threads(decided[0])
                self.log.change("threads", decided[0], decided[1])


def _stats(feeder) -> Optional[dict]:
    try:
        return feeder.stats() if feeder is not None else None
    except Exception:  # a Feeder's stats are a measure, never a reason for the tuner to stop
        return None
