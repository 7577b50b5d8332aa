"""What a Feeder's self-tuning decided, and why: one record for every knob set to ``"auto"``.

A Feeder made with ``workers="auto"`` or ``capacity="auto"`` (and the copy
pool's threads, which follow the gather) keeps one :class:`AutoLog`.  Each
tuner (workers, capacity, threads) reads the monitor's measures, decides, and
records its change here with the reason in the user's words; the log is what
``feeder.stats()["auto"]``, the monitor's line and ``theano-queue trace`` show.
Nothing here decides: the log only keeps what was decided, so that every tuner
says it the same way.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Change:
    """One decision: ``knob`` went from ``old`` to ``new`` at ``t`` (seconds since the Feeder started)."""

    t: float
    knob: str
    old: int
    new: int
    reason: str

    def __str__(self) -> str:
        step = self.new - self.old
        return "%+d %s: %s" % (step, self.knob, self.reason)


class AutoLog:
    """The current value of every tuned knob, and the history of their changes.

    ``clock`` is injectable so that tests can drive the tuners with a fake one.
    Thread-safe: tuners run in the Feeder's threads, readers in the user's.
    """

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._current: dict[str, int] = {}
        self._changes: list[Change] = []

    @property
    def started(self) -> float:
        """The clock's reading when the log began (``time.monotonic()`` seconds unless a clock was given)."""
        return self._start

    def now(self) -> float:
        """Seconds since the log began (the Feeder's start), on the log's clock."""
        return self._clock() - self._start

    def set(self, knob: str, value: int) -> None:
        """Record a knob's starting value (not a change)."""
        with self._lock:
            self._current[knob] = int(value)

    def change(self, knob: str, new: int, reason: str) -> Change:
        """Record that ``knob`` is now ``new``, because ``reason`` ("model waited 40 %, workers busy 97 %")."""
        with self._lock:
            old = self._current.get(knob, 0)
            self._current[knob] = int(new)
            entry = Change(self.now(), knob, old, int(new), reason)
            self._changes.append(entry)
            return entry

    def current(self, knob: str) -> int | None:
        with self._lock:
            return self._current.get(knob)

    @property
    def changes(self) -> list[Change]:
        with self._lock:
            return list(self._changes)

    def as_dict(self) -> dict:
        """What ``feeder.stats()["auto"]`` holds: every tuned knob's value, the last change and its reason,
        and the whole history as ``(t, knob, old, new, reason)`` tuples (for ``theano-queue trace``)."""
        with self._lock:
            last = self._changes[-1] if self._changes else None
            return {
                **self._current,
                "last_change": str(last) if last else None,
                "history": [(c.t, c.knob, c.old, c.new, c.reason) for c in self._changes],
            }

    def save(self, path: str) -> None:
        """Write :meth:`as_dict` to ``path`` as JSON: what ``theano-queue trace PATH`` shows."""
        with open(path, "w") as f:
            json.dump(self.as_dict(), f)

    def summary(self) -> str:
        """The monitor's words: ``"auto: 4 workers, capacity 6; +2 workers: model waited 40 %"``."""
        return summary_of(self.as_dict())


def summary_of(as_dict: dict) -> str:
    """:meth:`AutoLog.summary` from its :meth:`~AutoLog.as_dict` (what ``feeder.stats()["auto"]`` holds)."""
    knobs = sorted((k, v) for k, v in as_dict.items() if k not in ("last_change", "history"))
    words = ", ".join(_knob_words(knob, value) for knob, value in knobs) or "nothing tuned yet"
    last = as_dict.get("last_change")
    return "auto: %s%s" % (words, "; %s" % last if last else "")


def _knob_words(knob: str, value: int) -> str:
    """'4 workers', 'capacity 6', '2 threads': a count before its plural noun, a setting before its value."""
    return "%s %d" % (knob, value) if knob == "capacity" else "%d %s" % (value, knob)


def initial_values(as_dict: dict) -> dict:
    """Every knob's value before its first change, from :meth:`AutoLog.as_dict`'s current values and history."""
    values = {k: v for k, v in as_dict.items() if k not in ("last_change", "history")}
    for _t, knob, old, _new, _reason in reversed(as_dict.get("history", [])):
        values[knob] = old
    return values
