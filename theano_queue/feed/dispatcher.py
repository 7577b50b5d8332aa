"""The parent's side of a Feeder with worker processes: slots reserved, batches handed out, elements committed.

Every slot's staging lies in one shared block of memory (a memfd) that the
engine allocates; on a GPU queue it is page-locked in the parent with
``cuMemHostRegister``.  Workers (:mod:`.child`, started by :mod:`.pool`) map
it and write each sample into its row: the only host copy between a sample
and the device is the worker's own write (none with ``read_into``).

The parent runs two threads of its own:

* the *reserver* takes free slots from the ring (in ring order), waiting
  without the GIL and without limit; the wind-down wakes it (an
  ``_engine.Stop`` of its own), so nothing polls the ring;
* the *dispatcher* (the Feeder's thread) gives each reserved slot the next
  batch, cuts it into row ranges (a batch with variable-length components
  goes to one worker whole, which packs it), hands the items to the least
  busy workers, and commits a slot when all its rows are written.  It waits
  on the workers' pipes and their process sentinels at once, so a worker
  that dies is noticed at once, and it watches how long each worker has been
  on its item and on its start-up (``Feeder(timeout=...)``; :mod:`.watch`).

Order: slots are reserved in batch order, and with ``ordered=True`` a slot is
committed only after every earlier one.  With ``ordered=False`` a finished
batch is committed at once through the earliest reserved slot (the engine
swaps the two slots' staging).  Anything that fails (a sample, a worker, the
batch's indices) reaches the consumer as :class:`~theano_queue.FeederError`
after the batches before it.
"""

from __future__ import annotations

import collections
import logging
import math
import multiprocessing.connection as mp_connection
import os
import selectors
import signal
import threading
import time

import numpy as np

from .. import _engine
from ..core.errors import QueueClosed, QueueError, Stopped
from ..sampler import split_rows
from . import protocol as p
from .pool import STOP_WAIT_S, Pool, dataset_payload, start_method_context
from .rows import sample_failed
from .state import Progress, Schedule, Streams
from .watch import WorkerWatch

logger = logging.getLogger("theano_queue")

# A worker gets at most this many items ahead of the one it is working on.
_DEPTH = 2
# After a failure, earlier batches still in the workers' hands get this long to arrive.
_FAIL_GRACE_S = 0.5


class _Batch:
    __slots__ = ("seq", "key", "slot", "offset", "rows", "remaining", "complete")

    def __init__(self, seq, key, slot, offset, rows):
        self.seq, self.key, self.slot, self.offset, self.rows = seq, key, slot, offset, rows
        self.remaining = 0
        self.complete = False


class _Item:
    __slots__ = ("tag", "batch", "message")

    def __init__(self, tag, batch, message):
        self.tag, self.batch, self.message = tag, batch, message


class WorkerProducer(WorkerWatch):
    """Feeds a queue from ``workers`` processes; the Feeder's thread runs :meth:`run`.

    ``mode`` is "map" (a map-style dataset; ``sampler`` and ``cursor`` say
    which batches) or "iter" (an iterable run in every worker; ``skips`` says
    how many elements of each worker's stream were consumed before a resume).
    """

    def __init__(
        self,
        feeder,
        port,
        dataset,
        workers,
        mode,
        *,
        sampler=None,
        cursor=None,
        skips=None,
        epochs=1,
        seed=0,
        ordered=True,
        start_method=None,
        timeout=None,
    ):
        self.feeder, self.port, self.ring = feeder, port, port.ring
        self.n, self.mode, self.ordered, self.timeout = workers, mode, ordered, timeout
        self.skips = list(skips) if skips is not None else [0] * workers
        self.context = start_method_context(start_method)
        self.pool = Pool(workers, self.context, dataset_payload(dataset, self.context, feeder.name), feeder.name)
        self.config = {"seed": seed, "epochs": epochs, "skip": self.skips, "queue": port.name}
        self.components = port.layout.engine  # what the slots hold: the engine's components
        self.varying = port.layout.varying
        self.progress = Progress(port.ring)
        self.schedule = (
            Schedule(sampler, cursor, self.progress) if mode == "map" else Streams(self.skips, self.progress)
        )
        self.workers = []
        self.order = collections.deque()  # batches of reserved slots, in ring order
        self.todo = collections.deque()  # items not yet handed to a worker
        self.posted = collections.deque()  # slots the reserver took, not yet given a batch
        self.seq = self.tags = self.samples = 0
        self.more = True  # batches left to hand out
        self.failure = None  # (exception, first batch seq it spoils, deadline)
        self.started = self.all_ready = self.ended = self.last_commit = None
        self.stop_event = None
        self.winding_down = self.warned_slow = self.warned_start = False
        self.reserver = None
        # Ends the reserver's wait for a free slot (it waits without limit) when the run winds down.
        self.reserver_stop = _engine.Stop(self.ring)
        self.wake_r = self.wake_w = None
        self.positions = self.schedule.pending() if mode == "map" else None
        self.next_position = next(self.positions, None) if mode == "map" else None
        if mode == "map" and self.next_position is None:
            self.more = False

    # ---- life ---------------------------------------------------------------------------

    def start(self) -> None:
        self.progress.start()

    def run(self, stop) -> bool:
        """Produce until done (True), stopped (False) or failed (raises FeederError)."""
        self.stop_event = stop
        self.started = time.perf_counter()
        # Children inherit this thread's signal mask: blocked SIGINT until they ignore it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.workers = self.pool.start(
                self.ring, self.port.layout, self.mode, self.config, self.skips if self.mode == "iter" else None
            )
            self.wake_r, self.wake_w = os.pipe()
            os.set_blocking(self.wake_r, False)
            self.reserver = threading.Thread(
                target=self._reserve_loop, name=self.feeder.name + " reserver", daemon=True
            )
            self.reserver.start()
            return self._loop()
        finally:
            self.ended = time.perf_counter()
            self._give_slots_back()

    def _give_slots_back(self):
        """Aborts every slot reserved and not committed, each once no live worker writes into it any more.

        A slot given back may be taken by another producer at once: a worker
        still writing rows into its staging would corrupt that element.  So
        the slots whose rows are in workers' hands wait for those items to
        end (or for the workers to be killed, after STOP_WAIT_S).
        """
        self.more = False
        self.winding_down = True
        self.reserver_stop.set()
        if self.reserver is not None:
            self.reserver.join()
        while self.posted:
            self.ring.abort(self.posted.popleft())
        self.todo.clear()
        for w in self.workers:
            w.backlog.clear()
        deadline = time.monotonic() + STOP_WAIT_S
        while self.order:
            written = {id(item.batch) for w in self.workers if w.alive for item in w.items.values()}
            for batch in [b for b in self.order if id(b) not in written]:
                self.order.remove(batch)
                self.ring.abort(batch.slot)
            if not self.order:
                break
            if time.monotonic() >= deadline:
                self.pool.kill()
                continue
            busy = [w for w in self.workers if w.alive and w.items]
            ready = mp_connection.wait(
                [w.conn for w in busy] + [w.process.sentinel for w in busy], max(0.0, deadline - time.monotonic())
            )
            for w in busy:
                if w.conn in ready:
                    self._read(w)
                if w.process.sentinel in ready:
                    self._died(w)
        for fd in (self.wake_r, self.wake_w):
            if fd is not None:
                os.close(fd)
        self.wake_r = self.wake_w = None

    def shutdown(self) -> None:
        """Stops every worker and releases their descriptors; within about 1 s.  Idempotent."""
        self.pool.stop()

    # ---- the reserver thread ---------------------------------------------------------------

    def _reserve_loop(self):
        while self.more and not self.stop_event.is_set() and self.failure is None:
            try:
                slot, _ = self.ring.reserve(math.inf, self.reserver_stop)
            except Stopped:  # the run winds down (_give_slots_back)
                return
            except QueueError:  # closed or failed under us: the dispatcher finds out at its next commit
                self.more = False
                self._wake()
                return
            self.posted.append(slot)
            self._wake()

    def _wake(self):
        try:
            os.write(self.wake_w, b"\0")
        except (OSError, TypeError):
            pass

    # ---- the dispatcher --------------------------------------------------------------------

    def _loop(self):
        # One selector for the whole run: the pipes, the sentinels and the reserver's wake-up.
        with selectors.DefaultSelector() as selector:
            selector.register(self.wake_r, selectors.EVENT_READ, None)
            for w in self.workers:
                selector.register(w.conn.fileno(), selectors.EVENT_READ, (False, w))
                selector.register(w.process.sentinel, selectors.EVENT_READ, (True, w))
            return self._serve(selector)

    def _serve(self, selector):
        watched = set(self.workers)
        while True:
            if self.stop_event.is_set() or self.ring.closed:
                return False  # stopped, or the queue was closed under us: the consumer wants no more
            timeout = 0.1
            if self.failure is not None:
                timeout = max(0.0, min(timeout, self.failure[2] - time.monotonic()))
            ready = [key.data for key, _ in selector.select(timeout)]
            for data in ready:  # what the workers said first, then who died
                if data is not None and not data[0]:
                    self._read(data[1])
            for data in ready:
                if data is not None and data[0]:
                    self._died(data[1])
            if None in ready:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
            for w in [w for w in watched if not w.alive]:
                selector.unregister(w.conn.fileno())
                selector.unregister(w.process.sentinel)
                watched.discard(w)
            self._watch_time()
            while self.posted:
                self._assign(self.posted.popleft())
            self._hand_out()
            if not self._commit():
                return False
            if self.failure is not None and self._failure_due():
                self._fail()
            if not self.more and not self.order and not self.todo:
                return True  # slots the reserver still takes are given back on the way out

    def _read(self, w):
        while w.alive:
            try:
                if not w.conn.poll():
                    return
                message = w.conn.recv_bytes()
            except (EOFError, OSError):
                self._died(w)
                return
            kind, tag, index, busy = p.REPLY.unpack_from(message)
            w.busy += busy
            if kind == p.PHASE:
                w.phase, w.progress_at = index, time.monotonic()
                continue
            if kind == p.READY:
                w.ready_at = time.perf_counter()
                if all(x.ready_at for x in self.workers):
                    self.all_ready = w.ready_at
                while w.backlog and w.alive:
                    self._send(w, w.backlog.popleft())
                continue
            item = w.items.pop(tag, None)
            w.since = time.monotonic() if w.items else None  # it begins its next item now
            if kind == p.ERROR:
                self._fail_later(self._worker_error(w, tag, index, message), item.batch.seq if item else -1)
                continue
            if item is None:
                continue
            batch = item.batch
            if kind == p.END:
                w.exhausted = True
                self._drop(batch)
                if all(x.exhausted for x in self.workers if x.alive):
                    self.more = False
                continue
            if self.mode == "iter" or self.varying:  # the worker packed the element and counted its rows
                batch.rows = np.frombuffer(message, np.int64, len(self.components), p.REPLY.size).tolist()
            if self.mode == "iter":
                w.samples += 1
            else:
                done = p.MAP_ITEM.unpack_from(item.message)[4]
                w.samples += done
                self.samples += done
            batch.remaining -= 1
            if batch.remaining == 0:
                batch.complete = True

    def _worker_error(self, w, tag, index, message):
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

    def _died(self, w):
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
            doing = " while producing %s" % self._describe(next(iter(w.items.values())))
        elif w.ready_at is None:
            doing = " while %s" % self._phase(w)
            if code is not None and code > 0 and w.phase == p.IMPORTING and self._phase(w) != "starting":
                doing += (
                    " (see its output above; with spawn or forkserver the main script is imported again in "
                    "the worker: guard its entry point with if __name__ == '__main__':)"
                )
        exc = sample_failed("worker %d (pid %s) %s%s" % (w.id, w.pid, how, doing), worker=w.id)
        seqs = [item.batch.seq for item in list(w.items.values()) + list(w.backlog)]
        self._fail_later(exc, min(seqs) if seqs else self.seq)

    # ---- batches and items -------------------------------------------------------------------

    def _assign(self, slot):
        """Gives a freshly reserved slot its batch (in ring order), or gives the slot back."""
        if self.failure is not None or not self.more:
            self.ring.abort(slot)
            return
        if self.mode == "map":
            try:
                indices = self.schedule.sampler.batch(self.next_position)
            except Exception as exc:  # bucket_by, the shuffle: the batches before it still go first
                self.ring.abort(slot)
                self._fail_later(exc, self.seq)
                return
            self._assign_batch(slot, indices)
        else:
            self._assign_element(slot)

    def _assign_batch(self, slot, indices):
        offset = self.ring.slot_offset(slot)
        position = self.next_position
        self.next_position = next(self.positions, None)
        self.more = self.next_position is not None
        batch = _Batch(self.seq, position, slot, offset, len(indices))
        self.seq += 1
        self.order.append(batch)
        # A batch with variable-length components goes to one worker whole: it packs the element.
        for row0, row1 in split_rows(len(indices), 1 if self.varying else self.n):
            self.tags += 1
            message = p.MAP_ITEM.pack(p.MAP, self.tags, offset, row0, row1 - row0) + indices[row0:row1].tobytes()
            self.todo.append(_Item(self.tags, batch, message))
            batch.remaining += 1

    def _assign_element(self, slot):
        candidates = [w for w in self.workers if w.alive and not w.exhausted]
        if not candidates:
            self.more = False
            self.ring.abort(slot)
            return
        if self.ordered:  # round robin: the stream that has given the fewest elements
            w = min(candidates, key=lambda x: (x.assigned, x.id))
        else:
            w = min(candidates, key=lambda x: (len(x.items), x.id))
        batch = _Batch(self.seq, (w.id, w.assigned), slot, self.ring.slot_offset(slot), None)
        self.seq += 1
        self.order.append(batch)
        w.assigned += 1
        self.tags += 1
        batch.remaining = 1
        self._send(w, _Item(self.tags, batch, p.ITER_ITEM.pack(p.ITER, self.tags, batch.offset)))

    def _hand_out(self):
        """Gives waiting items to the ready workers with the fewest in hand."""
        while self.todo:
            free = [w for w in self.workers if w.alive and w.ready_at is not None and len(w.items) < _DEPTH]
            if not free:
                return
            self._send(min(free, key=lambda w: len(w.items)), self.todo.popleft())

    def _send(self, w, item):
        if w.ready_at is None:  # nothing may share its pipe with the dataset on its way
            w.backlog.append(item)
            return
        if not w.items:
            w.since = time.monotonic()
        w.items[item.tag] = item
        try:
            w.conn.send_bytes(item.message)
        except (OSError, ValueError):
            self._died(w)

    def _drop(self, batch):
        """An iterable worker had no element for this slot: give it back."""
        self.order.remove(batch)
        self.ring.abort(batch.slot)

    def _commit(self):
        """Commits what may be committed now; False when the queue was closed under us."""
        try:
            if self.ordered:
                while self.order and self.order[0].complete and self._deliverable(self.order[0]):
                    self._commit_head(self.order[0])
            else:
                for batch in [b for b in self.order if b.complete and self._deliverable(b)]:
                    head = self.order[0]
                    if batch is not head:
                        # The finished batch's staging becomes the earliest slot's: it goes first.
                        self.ring.swap_staging(head.slot, batch.slot)
                        head.slot, batch.slot = batch.slot, head.slot
                        self.order[self.order.index(batch)] = head
                        self.order[0] = batch
                    self._commit_head(batch)
        except QueueClosed:
            return False
        return True

    def _deliverable(self, batch):
        return self.failure is None or (self.ordered and batch.seq < self.failure[1])

    def _commit_head(self, batch):
        rows = batch.rows if isinstance(batch.rows, list) else [batch.rows] * len(self.components)
        self.progress.committing(batch.key)
        self.order.popleft()
        self.ring.commit(batch.slot, rows)
        self.feeder.produced += 1
        self.last_commit = time.monotonic()

    # ---- failures ------------------------------------------------------------------------------

    def _fail_later(self, exc, seq):
        """A batch is lost: deliver the ones before it (ordered), then fail."""
        if self.winding_down:
            return  # stopping anyway; what failed first is what the consumer hears
        self.more = False
        if self.failure is None:
            self.failure = (exc, seq, time.monotonic() + _FAIL_GRACE_S)
        elif seq < self.failure[1]:
            self.failure = (exc, seq, self.failure[2])
        if not self.ordered or seq < 0:
            self._fail()
        self.todo = collections.deque(i for i in self.todo if self._deliverable(i.batch))

    def _failure_due(self):
        exc, seq, deadline = self.failure
        return time.monotonic() >= deadline or not any(b.seq < seq for b in self.order)

    def _fail(self):
        # Failed now, so that consumers stop at the slots still being written (given back on the way out).
        self.feeder.fail(self.failure[0])
        raise self.failure[0]

    # ---- what the Feeder reports --------------------------------------------------------------

    def state_dict(self) -> dict:
        return self.schedule.state_dict()

    def stats(self) -> dict:
        now = self.ended or time.perf_counter()
        busy = []
        for w in self.workers:
            elapsed = now - w.ready_at if w.ready_at else 0.0
            busy.append(min(1.0, w.busy / elapsed) if elapsed > 0 else 0.0)
        first = min((w.ready_at for w in self.workers if w.ready_at), default=None)
        elapsed = now - first if first else 0.0  # since the first worker could produce
        samples = self.samples if self.mode == "map" else sum(w.samples for w in self.workers)
        out = {
            "workers": self.n,
            "elements": self.feeder.produced,
            "samples": samples,
            "busy": float(sum(busy) / len(busy)) if busy else 0.0,
            "worker_busy": busy,
            "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
            "startup_s": (self.all_ready - self.started) if self.all_ready and self.started else None,
            "pids": [w.pid for w in self.workers],
            # Bytes of the pickled dataset each worker is sent (0 with fork: it inherits it).
            "payload_bytes": len(self.pool.payload) if isinstance(self.pool.payload, bytes) else 0,
            "start_method": self.context.get_start_method(),
        }
        if self.mode == "map":
            out["batches_per_epoch"] = self.schedule.sampler.batches_per_epoch
        return out
