"""Where the consumer is: the log of committed elements, and the iterable's saved state, validated."""

from __future__ import annotations

import collections
import threading
from typing import Any, Deque, List, Optional

import numpy as np

from ..sampler import STATE_VERSION


def iterable_state(consumed) -> dict:
    return {"version": STATE_VERSION, "kind": "iterable", "consumed": [int(c) for c in consumed]}


def iterable_skips(state: Optional[dict], streams: int) -> List[int]:
    """Per-stream counts of elements already consumed, from a saved state (zeros for None); ValueError naming
    the field that is wrong."""
    if state is None:
        return [0] * streams
    if not isinstance(state, dict) or state.get("kind") != "iterable":
        raise ValueError(
            "this state was not saved by a Feeder over an iterable (its kind is %r): %r"
            % (state.get("kind") if isinstance(state, dict) else None, state)
        )
    if state.get("version") != STATE_VERSION:
        raise ValueError("state version %r; this theano_queue reads version %d" % (state.get("version"), STATE_VERSION))
    consumed = state.get("consumed")
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
    return [int(c) for c in consumed]


class Progress:
    """What the consumer has taken of what a producer committed, for state_dict().

    Producers append a key per element to ``log`` *before* committing it, in
    commit order, which is the order consumers take elements in.  The ring's
    ``dequeued`` counter, less its value when the feeder started, says how
    many of them were taken.
    """

    def __init__(self, ring: Any):
        self.ring = ring
        self.lock = threading.Lock()
        self.log: Deque[Any] = collections.deque()
        self.base = None
        self.taken = 0

    def start(self) -> None:
        stats = self.ring.stats()
        self.base = stats["dequeued"] + stats["size"]

    def consumed_keys(self) -> list:
        """Keys of elements taken since the last call (under the lock)."""
        if self.base is None:
            return []
        taken = self.ring.stats()["dequeued"] - self.base
        keys = []
        while self.taken < taken and self.log:
            keys.append(self.log.popleft())
            self.taken += 1
        return keys
