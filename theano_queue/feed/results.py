"""What a Feeder's workers give back: their replies read, their deaths noticed, finished batches committed in
order, and the run's one failure.

Anything that fails (a sample, a worker, the batch's indices) becomes the
run's failure: with ``ordered=True`` the batches before the one it spoils
are still committed (for :data:`FAIL_GRACE_S` at most), then the queue fails
with it (:class:`~theano_queue.FeederError` for the consumer).
"""

from __future__ import annotations

import signal
import time
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ..core.errors import QueueClosed
from . import protocol as p
from .handout import Batch, Handout
from .rows import sample_failed

#: After a failure, earlier batches still in the workers' hands get this long to arrive.
FAIL_GRACE_S = 0.5


class Results:
    """Reads the workers' replies into the batches of ``handout``, commits the batches that are done, and keeps
    the run's failure.

    ``describe(item)`` and ``phase_of(worker)`` put a worker's work and
    start-up in words (:class:`~.watch.ItemWatch`).
    """

    def __init__(
        self,
        feeder: Any,
        ring: Any,
        progress: Any,
        handout: Handout,
        mode: str,
        components: int,
        varying: bool,
        ordered: bool,
        describe: Callable[[Any], str],
        phase_of: Callable[[Any], str],
    ):
        self.feeder, self.ring, self.progress, self.handout = feeder, ring, progress, handout
        self.mode, self.components, self.varying, self.ordered = mode, components, varying, ordered
        self.describe, self.phase_of = describe, phase_of
        self.failure: Optional[Tuple[BaseException, int, float]] = None  # (exception, first seq it spoils, deadline)
        self.samples = 0
        self.all_ready: Optional[float] = None
        self.last_commit: Optional[float] = None
        self.winding_down = False

    # ---- replies ------------------------------------------------------------------------

    def read(self, w, workers: List[Any]) -> None:
        """Everything ``w`` has said so far (its pipe does not block)."""
        while w.alive:
            try:
                if not w.conn.poll():
                    return
                message = w.conn.recv_bytes()
            except (EOFError, OSError):
                self.died(w)
                return
            self.reply(w, workers, message)

    def reply(self, w, workers: List[Any], message: bytes) -> None:
        kind, tag, index, busy = p.REPLY.unpack_from(message)
        w.busy += busy
        if kind == p.PHASE:
            w.phase, w.progress_at = index, time.monotonic()
            return
        if kind == p.READY:
            w.ready_at = time.perf_counter()
            if all(x.ready_at for x in workers):
                self.all_ready = w.ready_at
            self.handout.send_backlog(w)
            return
        item = w.items.pop(tag, None)
        w.since = time.monotonic() if w.items else None  # it begins its next item now
        if kind == p.ERROR:
            self.fail_later(self.worker_error(w, tag, index, message), item.batch.seq if item else -1)
            return
        if item is None:
            return
        batch = item.batch
        if kind == p.END:
            w.exhausted = True
            self.handout.drop(batch)
            if all(x.exhausted for x in workers if x.alive):
                self.handout.finish()
            return
        if self.mode == "iter" or self.varying:  # the worker packed the element and counted its rows
            batch.rows = np.frombuffer(message, np.int64, self.components, p.REPLY.size).tolist()
        if self.mode == "iter":
            w.samples += 1
        else:
            done = p.MAP_ITEM.unpack_from(item.message)[4]
            w.samples += done
            self.samples += done
        batch.remaining -= 1
        if batch.remaining == 0:
            batch.complete = True

    def worker_error(self, w, tag: int, index: int, message: bytes) -> BaseException:
        name, text, tb, original = p.read_error(message)
        where = (
            "failed to start"
            if tag < 0
            else "raised on sample %d" % index
            if self.mode == "map"
            else "raised on element %d of its stream" % index
        )
        return sample_failed(
            "worker %d (pid %d) %s: %s: %s\n\nTraceback in the worker:\n%s"
            % (w.id, w.pid, where, name, text, tb.rstrip()),
            index if tag >= 0 else None,
            w.id,
            tb,
            original,
        )

    def died(self, w) -> None:
        """``w`` is gone (its sentinel fired, or its pipe broke): the run fails, naming how and while doing what."""
        if not w.alive:
            return
        w.alive = False
        w.process.join(0.05)
        code = w.process.exitcode
        if code is None:
            how = "closed its pipe"
        elif code < 0:
            try:
                how = "was killed by %s" % signal.Signals(-code).name
            except ValueError:
                how = "was killed by signal %d" % -code
        else:
            how = "exited with status %d" % code
        doing = ""
        if w.items:
            doing = " while producing %s" % self.describe(next(iter(w.items.values())))
        elif w.ready_at is None:
            doing = " while %s" % self.phase_of(w)
            if code is not None and code > 0 and w.phase == p.IMPORTING and self.phase_of(w) != "starting":
                doing += (
                    " (see its output above; with spawn or forkserver the main script is imported again in "
                    "the worker: guard its entry point with if __name__ == '__main__':)"
                )
        exc = sample_failed("worker %d (pid %s) %s%s" % (w.id, w.pid, how, doing), worker=w.id)
        seqs = [item.batch.seq for item in list(w.items.values()) + list(w.backlog)]
        self.fail_later(exc, min(seqs) if seqs else self.handout.seq)

    # ---- commits ------------------------------------------------------------------------

    def commit(self) -> bool:
        """Commits what may be committed now; False when the queue was closed under us."""
        order = self.handout.order
        try:
            if self.ordered:
                while order and order[0].complete and self.deliverable(order[0]):
                    self.commit_head(order[0])
            else:
                for batch in [b for b in order if b.complete and self.deliverable(b)]:
                    head = order[0]
                    if batch is not head:
                        # The finished batch's staging becomes the earliest slot's: it goes first.
                        self.ring.swap_staging(head.slot, batch.slot)
                        head.slot, batch.slot = batch.slot, head.slot
                        order[order.index(batch)] = head
                        order[0] = batch
                    self.commit_head(batch)
        except QueueClosed:
            return False
        return True

    def deliverable(self, batch: Batch) -> bool:
        return self.failure is None or (self.ordered and batch.seq < self.failure[1])

    def commit_head(self, batch: Batch) -> None:
        rows = batch.rows if isinstance(batch.rows, list) else [batch.rows] * self.components
        self.progress.committing(batch.key)
        self.handout.order.popleft()
        self.ring.commit(batch.slot, rows)
        self.feeder.produced += 1
        self.last_commit = time.monotonic()

    # ---- the failure --------------------------------------------------------------------

    def fail_later(self, exc: BaseException, seq: int) -> None:
        """A batch is lost: deliver the ones before it (ordered), then fail."""
        if self.winding_down:
            return  # stopping anyway; what failed first is what the consumer hears
        self.handout.finish()
        if self.failure is None:
            self.failure = (exc, seq, time.monotonic() + FAIL_GRACE_S)
        elif seq < self.failure[1]:
            self.failure = (exc, seq, self.failure[2])
        if not self.ordered or seq < 0:
            self.fail()
        self.handout.keep_only(self.deliverable)

    def due(self) -> bool:
        """Whether the failure is to be raised now: its grace is over, or no earlier batch is left to deliver."""
        if self.failure is None:
            return False
        exc, seq, deadline = self.failure
        return time.monotonic() >= deadline or not any(b.seq < seq for b in self.handout.order)

    def fail(self) -> None:
        # Failed now, so that consumers stop at the slots still being written (given back on the way out).
        assert self.failure is not None
        self.feeder.fail(self.failure[0])
        raise self.failure[0]
