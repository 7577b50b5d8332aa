"""The hand-out of work to a Feeder's workers: each reserved slot its batch, each batch cut into items, each item
to a ready worker with the fewest in hand.

The order is the sampler's (map-style) or the streams' turn (iterable): the
workers' number and timing never change which batch a slot gets, only who
writes it.  A batch with variable-length components goes to one worker
whole (it packs the element); a fixed one is cut into row ranges, one per
worker.
"""

from __future__ import annotations

import collections
import time
from typing import Any, List, Optional, Tuple

from . import protocol as p
from .sampler import split_rows

#: A worker gets at most this many items ahead of the one it is working on.
DEPTH = 2


class Batch:
    """One reserved slot and the batch it gets: ``seq`` (hand-out order), ``key`` (the sampler's position, or
    (stream, n) of an iterable), and how many of its items are not done yet."""

    __slots__ = ("seq", "key", "slot", "offset", "rows", "remaining", "complete")

    def __init__(self, seq, key, slot, offset, rows):
        self.seq, self.key, self.slot, self.offset, self.rows = seq, key, slot, offset, rows
        self.remaining = 0
        self.complete = False


class Item:
    """One message of work for one worker: a row range of a batch, or one element of its stream."""

    __slots__ = ("tag", "batch", "message")

    def __init__(self, tag, batch, message):
        self.tag, self.batch, self.message = tag, batch, message


class Handout:
    """Batches for the reserved slots (in ring order), and their items for the workers.

    ``order`` holds the batches of the reserved slots not committed yet, in
    ring order; ``todo`` the items not yet given to a worker.  A send that
    finds a worker's pipe broken is noted in ``broken``: the caller says the
    worker died (:meth:`take_broken`).
    """

    def __init__(self, ring: Any, mode: str, schedule: Any, varying: bool, split: int, ordered: bool):
        self.ring, self.mode, self.schedule = ring, mode, schedule
        self.varying, self.split, self.ordered = varying, split, ordered
        self.order: collections.deque = collections.deque()
        self.todo: collections.deque = collections.deque()
        self.broken: List[Any] = []
        self.seq = self.tags = 0
        self.positions: Any = schedule.pending() if mode == "map" else iter(())
        self.next_position = next(self.positions, None)
        self.more = not (mode == "map" and self.next_position is None)  # batches left to hand out

    def finish(self) -> None:
        """No more batches: the run ends, or fails."""
        self.more = False

    def assign(self, slot: int, workers: List[Any]) -> Optional[Tuple[BaseException, int]]:
        """Gives a freshly reserved slot its batch, or gives the slot back; (exception, seq) when the sampler
        failed to say which batch (the batches before it still go first)."""
        if not self.more:
            self.ring.abort(slot)
            return None
        if self.mode != "map":
            self.assign_element(slot, workers)
            return None
        try:
            indices = self.schedule.sampler.batch(self.next_position)
        except Exception as exc:  # bucket_by, the shuffle
            self.ring.abort(slot)
            return exc, self.seq
        self.assign_batch(slot, indices)
        return None

    def assign_batch(self, slot: int, indices) -> None:
        offset = self.ring.slot_offset(slot)
        position = self.next_position
        self.next_position = next(self.positions, None)
        self.more = self.next_position is not None
        batch = Batch(self.seq, position, slot, offset, len(indices))
        self.seq += 1
        self.order.append(batch)
        for row0, row1 in split_rows(len(indices), 1 if self.varying else self.split):
            self.tags += 1
            message = p.MAP_ITEM.pack(p.MAP, self.tags, offset, row0, row1 - row0) + indices[row0:row1].tobytes()
            self.todo.append(Item(self.tags, batch, message))
            batch.remaining += 1

    def assign_element(self, slot: int, workers: List[Any]) -> None:
        candidates = [w for w in workers if w.alive and not w.exhausted]
        if not candidates:
            self.more = False
            self.ring.abort(slot)
            return
        if self.ordered:  # round robin: the stream that has given the fewest elements
            w = min(candidates, key=lambda x: (x.assigned, x.id))
        else:
            w = min(candidates, key=lambda x: (len(x.items), x.id))
        batch = Batch(self.seq, (w.id, w.assigned), slot, self.ring.slot_offset(slot), None)
        self.seq += 1
        self.order.append(batch)
        w.assigned += 1
        self.tags += 1
        batch.remaining = 1
        self.send(w, Item(self.tags, batch, p.ITER_ITEM.pack(p.ITER, self.tags, batch.offset)))

    def hand_out(self, workers: List[Any]) -> None:
        """Gives waiting items to the ready workers with the fewest in hand (DEPTH at most each)."""
        while self.todo:
            free = [
                w for w in workers if w.alive and w.ready_at is not None and not w.retiring and len(w.items) < DEPTH
            ]
            if not free:
                return
            self.send(min(free, key=lambda w: len(w.items)), self.todo.popleft())

    def send(self, w, item: Item) -> None:
        if w.ready_at is None:  # nothing may share its pipe with the dataset on its way
            w.backlog.append(item)
            return
        if not w.items:
            w.since = time.monotonic()
        w.items[item.tag] = item
        try:
            w.conn.send_bytes(item.message)
        except (OSError, ValueError):
            self.broken.append(w)

    def send_backlog(self, w) -> None:
        """What waited for ``w`` while it started: sent now that it is ready."""
        while w.backlog and w.alive:
            self.send(w, w.backlog.popleft())

    def take_broken(self) -> List[Any]:
        broken, self.broken = self.broken, []
        return broken

    def drop(self, batch: Batch) -> None:
        """An iterable worker had no element for this slot: give it back."""
        self.order.remove(batch)
        self.ring.abort(batch.slot)

    def keep_only(self, deliverable) -> None:
        """Forgets the items not yet handed out whose batch is not ``deliverable`` (after a failure)."""
        self.todo = collections.deque(i for i in self.todo if deliverable(i.batch))
