"""Where the consumer is: the log of committed elements, and the iterable's saved state, validated."""

from __future__ import annotations

import collections
import collections.abc
import threading
from typing import Any, Deque, List, Optional

import numpy as np

from .sources import past_the_end

#: The version a state dict is saved with: 2 records the shuffled permutation's kind ("numpy" or "keyed").
STATE_VERSION = 2
#: The versions read: a version-1 state (no kind) resumes with the permutation it was saved with, numpy's.
READ_VERSIONS = (1, 2)


def check_version(state: dict) -> int:
    version = state.get("version")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        raise ValueError(
            "state version %r; this theano_queue reads version%s %s"
            % (version, "s" if len(READ_VERSIONS) > 1 else "", " and ".join(map(str, READ_VERSIONS)))
        )
    return version


def iterable_state(consumed) -> dict:
    return {"version": STATE_VERSION, "kind": "iterable", "consumed": [int(c) for c in consumed]}


def as_state(state: Any, kind: str, where_saved: str) -> dict:
    """A saved state as a dict (any Mapping is one), refused naming its kind when it is not ``kind``'s."""
    if not isinstance(state, collections.abc.Mapping) or state.get("kind") != kind:
        raise ValueError(
            "this state was not saved by a Feeder over %s (%s); expected the dict Feeder.state_dict() gave"
            % (
                where_saved,
                "its kind is %r" % state.get("kind")
                if isinstance(state, collections.abc.Mapping)
                else "it is a %s, not a mapping" % type(state).__name__,
            )
        )
    return dict(state)


def stream_lengths(dataset: Any, epochs: Optional[int], streams: int) -> Optional[List[int]]:
    """Elements each worker stream gives over the run, where that is known before it runs (a list or tuple of
    batches, a known number of epochs: sources.stream deals them out in turn); else None."""
    if epochs is None or not isinstance(dataset, (list, tuple)):
        return None
    return [len(range(me, epochs * len(dataset), streams)) for me in range(streams)]


def iterable_skips(state: Any, streams: int, lengths: Optional[List[int]] = None) -> List[int]:
    """Per-stream counts of elements already consumed, from a saved state (zeros for None); ValueError naming
    the field that is wrong (one line each: what is wrong, and what would be right)."""
    if state is None:
        return [0] * streams
    state = as_state(state, "iterable", "an iterable")
    check_version(state)
    consumed = state.get("consumed")
    if isinstance(consumed, np.ndarray):
        consumed = consumed.tolist()
    if not isinstance(consumed, (list, tuple)) or not all(
        not isinstance(c, bool) and isinstance(c, (int, np.integer)) and c >= 0 for c in consumed
    ):
        raise ValueError(
            "the state's consumed must be a list of ints >= 0, one per worker stream, got %r" % (consumed,)
        )
    if len(consumed) != streams:
        raise ValueError(
            "the state's consumed was saved with %d worker stream(s), this Feeder runs %d: an "
            "iterable's streams depend on tq.worker_info(), resume with the same number of workers"
            % (len(consumed), streams)
        )
    if lengths is not None:
        wrong = [(me, c, n) for me, (c, n) in enumerate(zip(consumed, lengths)) if c > n]
        if wrong:
            raise past_the_end(wrong)
    return [int(c) for c in consumed]


class NotExact(RuntimeError):
    """state_dict() cannot say exactly where the consumer is (Feeder.state_dict names why)."""


class Progress:
    """What the consumer has taken of what a producer committed, for state_dict().

    Producers append a key per element to ``log`` *before* committing it, in
    commit order, which is the order consumers take elements in; ``logged``
    counts every key ever logged (taken ones included).  The ring's
    ``dequeued`` counter, less its value when the feeder started, says how
    many of them were taken.
    """

    def __init__(self, ring: Any):
        self.ring = ring
        self.lock = threading.Lock()
        self.log: Deque[Any] = collections.deque()
        self.logged = 0
        self.base = self.enqueued_base = None
        self.taken = 0

    def start(self) -> None:
        stats = self.ring.stats()
        self.base = stats["dequeued"] + stats["size"]
        self.enqueued_base = stats["enqueued"]

    def consumed_keys(self) -> list:
        """Keys of elements taken since the last call (under the lock)."""
        if self.base is None:
            return []
        stats = self.ring.stats()
        # Keys are logged before their commit, so more puts than keys means someone else put too.
        foreign = stats["enqueued"] - self.enqueued_base - self.logged
        if foreign > 0:
            raise NotExact(
                "%d element(s) put into the queue during this run came from elsewhere (q.put, or another "
                "producer), and the queue counts what its consumers took, not whose it was" % foreign
            )
        taken = stats["dequeued"] - self.base
        keys = []
        while self.taken < taken and self.log:
            keys.append(self.log.popleft())
            self.taken += 1
        return keys

    def committing(self, *keys) -> None:
        """Logs the keys of the elements about to be committed, in commit order: before the commit, since
        consumers may take them at once."""
        with self.lock:
            self.logged += len(keys)
            self.log.extend(keys)

    def committing_one(self, key) -> None:
        """committing(key) for a producer that is the run's only thread logging keys (an iterable in the
        Feeder's thread), without the lock: the key is counted before it is held, and deque's append is
        atomic, so a reader never sees a commit that the log does not count."""
        self.logged += 1
        self.log.append(key)

    def withdraw(self) -> None:
        """Takes back the key logged last: its element was refused before its commit."""
        with self.lock:
            self.log.pop()
            self.logged -= 1


class Schedule:
    """The schedule of a map-style or array dataset, one for every runner (the Feeder's thread, the worker
    pool, the copy pool, the GPU): the sampler, the cursor the run starts from, the positions the consumer
    took (logged in ``progress`` by the runner) and :meth:`state_dict`."""

    def __init__(self, sampler: Any, cursor: Any, progress: Progress):
        self.sampler, self.start_cursor, self.consumed = sampler, cursor.copy(), cursor.copy()
        self.progress = progress

    def pending(self):
        """The positions this run produces, in order (those the resumed state had taken left out)."""
        return self.sampler.pending(self.start_cursor)

    def state_dict(self) -> dict:
        with self.progress.lock:
            for position in self.progress.consumed_keys():
                self.consumed.add(position)
            return self.sampler.state_dict(self.consumed)


class Streams:
    """The schedule of an iterable run by workers: one stream per worker, each resumed by skipping the
    elements it had given; keys are (stream, n)."""

    def __init__(self, skips: List[int], progress: Progress):
        self.skips, self.consumed = list(skips), list(skips)
        self.progress = progress

    def state_dict(self) -> dict:
        with self.progress.lock:
            for key in self.progress.consumed_keys():
                self.consumed[key[0]] += 1
            return iterable_state(self.consumed)
