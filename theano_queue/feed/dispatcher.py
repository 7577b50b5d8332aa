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
  on its item and on its start-up.

The dispatcher composes parts of one job each: :mod:`.startup` (the workers'
start-up bounded and reported), :mod:`.handout` (each slot its batch, each
item its worker), :mod:`.watch` (the clock on items, the words) and
:mod:`.results` (replies, deaths, commits, the failure); :mod:`.pool` starts
and stops the processes.

Order: slots are reserved in batch order, and with ``ordered=True`` a slot is
committed only after every earlier one.  With ``ordered=False`` a finished
batch is committed at once through the earliest reserved slot (the engine
swaps the two slots' staging).  Anything that fails (a sample, a worker, the
batch's indices) reaches the consumer as :class:`~theano_queue.FeederError`
after the batches before it.
"""

from __future__ import annotations

import collections
import math
import multiprocessing.connection as mp_connection
import os
import selectors
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .. import _engine
from ..core.errors import QueueError, Stopped
from .autoworkers import WorkerTuner, resident_bytes
from .handout import Handout
from .pool import STOP_WAIT_S, Pool, dataset_payload, start_method_context
from .results import Results
from .startup import STARTUP_TIMEOUT_S, StartupWatch
from .state import Progress, Schedule, Streams
from .watch import ItemWatch


@dataclass(frozen=True)
class WorkerRun:
    """What a :class:`WorkerProducer`'s run is, beyond its dataset and its workers; the Feeder's factory makes it.

    ``mode`` is "map" (a map-style dataset; ``sampler`` and ``cursor`` say
    which batches; ``tuner``, for ``workers="auto"``, decides the count) or
    "iter" (an iterable run in every worker; ``skips`` says how many elements
    of each worker's stream were consumed before a resume).  The others are
    the Feeder's arguments of the same names, checked.
    """

    mode: str
    sampler: Any = None
    cursor: Any = None
    skips: Optional[Sequence[int]] = None
    epochs: Optional[int] = 1
    seed: int = 0
    ordered: bool = True
    start_method: Any = None  # a name, a multiprocessing context, or None (spawn)
    timeout: Optional[float] = None
    startup_timeout: float = STARTUP_TIMEOUT_S
    tuner: Optional[WorkerTuner] = None


class WorkerProducer:
    """Feeds a queue from ``workers`` processes as ``plan`` (a :class:`WorkerRun`) says; the Feeder's thread runs
    :meth:`run`."""

    def __init__(self, feeder, port, dataset, workers, plan):
        self.feeder, self.port, self.ring = feeder, port, port.ring
        # workers="auto" (map-style only): the tuner decides the count, starting from its own.
        tuner, mode = plan.tuner, plan.mode
        self.tuner = tuner
        if tuner is not None:
            workers = tuner.start_count()
        self.n, self.mode = workers, mode
        self.skips = list(plan.skips) if plan.skips is not None else [0] * workers
        self.context = start_method_context(plan.start_method)
        payload = dataset_payload(dataset, self.context, feeder.name)
        most = tuner.limit(0)[0] if tuner is not None else workers
        self.pool = Pool(workers, self.context, payload, feeder.name, most)
        self.config = {"seed": plan.seed, "epochs": plan.epochs, "skip": self.skips, "queue": port.name}
        self.progress = Progress(port.ring)
        self.schedule = (
            Schedule(plan.sampler, plan.cursor, self.progress) if mode == "map" else Streams(self.skips, self.progress)
        )
        varying = port.layout.varying
        self.handout = Handout(self.ring, mode, self.schedule, varying, workers, plan.ordered)
        self.watch = ItemWatch(
            feeder.name, plan.timeout, mode, plan.sampler, self.pool.current, self.context.get_start_method()
        )
        self.startup = StartupWatch(feeder.name, plan.timeout, plan.startup_timeout, self.watch.phase_of)
        self.results = Results(
            feeder,
            self.ring,
            self.progress,
            self.handout,
            mode,
            len(port.layout.engine),  # the engine's components: what the slots hold
            varying,
            plan.ordered,
            self.watch.describe,
            self.watch.phase_of,
        )
        self.workers = []
        self.selector = None
        self.watched = set()  # workers whose pipe and sentinel the selector watches
        self.posted = collections.deque()  # slots the reserver took, not yet given a batch
        self.started = self.ended = None
        self.stop_event = None
        self.reserver = None
        # Ends the reserver's wait for a free slot (it waits without limit) when the run winds down.
        self.reserver_stop = _engine.Stop(self.ring)
        self.wake_r = self.wake_w = None

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
            self.reserver = threading.Thread(target=self.reserve_loop, name=self.feeder.name + " reserver", daemon=True)
            self.reserver.start()
            return self.loop()
        finally:
            self.ended = time.perf_counter()
            self.give_slots_back()

    def give_slots_back(self):
        """Aborts every slot reserved and not committed, each once no live worker writes into it any more.

        A slot given back may be taken by another producer at once: a worker
        still writing rows into its staging would corrupt that element.  So
        the slots whose rows are in workers' hands wait for those items to
        end (or for the workers to be killed, after STOP_WAIT_S).
        """
        order = self.handout.order
        self.handout.finish()
        self.results.winding_down = True
        self.reserver_stop.set()
        if self.reserver is not None:
            self.reserver.join()
        while self.posted:
            self.ring.abort(self.posted.popleft())
        self.handout.todo.clear()
        for w in self.workers:
            w.backlog.clear()
        deadline = time.monotonic() + STOP_WAIT_S
        while order:
            written = {id(item.batch) for w in self.workers if w.alive for item in w.items.values()}
            for batch in [b for b in order if id(b) not in written]:
                order.remove(batch)
                self.ring.abort(batch.slot)
            if not order:
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
                    self.results.read(w, self.workers)
                if w.process.sentinel in ready:
                    self.results.died(w)
        for fd in (self.wake_r, self.wake_w):
            if fd is not None:
                os.close(fd)
        self.wake_r = self.wake_w = None

    def shutdown(self) -> None:
        """Stops every worker and releases their descriptors; within about 1 s.  Idempotent."""
        self.pool.stop()

    # ---- the reserver thread ---------------------------------------------------------------

    def reserve_loop(self):
        while self.handout.more and not self.stop_event.is_set() and self.results.failure is None:
            try:
                slot, _ = self.ring.reserve(math.inf, self.reserver_stop)
            except Stopped:  # the run winds down (give_slots_back)
                return
            except QueueError:  # closed or failed under us: the dispatcher finds out at its next commit
                self.handout.finish()
                self.wake()
                return
            self.posted.append(slot)
            self.wake()

    def wake(self):
        try:
            os.write(self.wake_w, b"\0")
        except (OSError, TypeError):
            pass

    # ---- the dispatcher --------------------------------------------------------------------

    def loop(self):
        # One selector for the whole run: the pipes, the sentinels and the reserver's wake-up.
        with selectors.DefaultSelector() as selector:
            self.selector = selector
            selector.register(self.wake_r, selectors.EVENT_READ, None)
            for w in self.workers:
                self.watch_worker(w)
            return self.serve(selector)

    def watch_worker(self, w):
        self.selector.register(w.conn.fileno(), selectors.EVENT_READ, (False, w))
        self.selector.register(w.process.sentinel, selectors.EVENT_READ, (True, w))
        self.watched.add(w)

    def serve(self, selector):
        handout, results = self.handout, self.results
        watched = self.watched
        while True:
            if self.stop_event.is_set() or self.ring.closed:
                return False  # stopped, or the queue was closed under us: the consumer wants no more
            timeout = 0.1
            if results.failure is not None:
                timeout = max(0.0, min(timeout, results.failure[2] - time.monotonic()))
            ready = [key.data for key, _ in selector.select(timeout)]
            for data in ready:  # what the workers said first, then who died
                if data is not None and not data[0]:
                    results.read(data[1], self.workers)
            for data in ready:
                if data is not None and data[0]:
                    results.died(data[1])
            if None in ready:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
            for w in [w for w in watched if not w.alive]:
                selector.unregister(w.conn.fileno())
                selector.unregister(w.process.sentinel)
                watched.discard(w)
            self.watch_time()
            if self.tuner is not None:
                self.autoscale()
            while self.posted:
                failed = handout.assign(self.posted.popleft(), self.workers)
                if failed is not None:
                    results.fail_later(*failed)
            handout.hand_out(self.workers)
            for w in handout.take_broken():
                results.died(w)
            if not results.commit():
                return False
            if results.due():
                results.fail()
            if not handout.more and not handout.order and not handout.todo:
                return True  # slots the reserver still takes are given back on the way out

    def watch_time(self):
        """The clocks: each starting worker's (:mod:`.startup`), each item's (:mod:`.watch`)."""
        now = time.monotonic()
        failure = self.startup.check(self.workers, now)
        if failure is not None:
            self.results.fail_later(failure, self.handout.seq)
        for exc, seq in self.watch.check(self.workers, now):
            self.results.fail_later(exc, seq)

    # ---- workers="auto" ------------------------------------------------------------------------

    def active(self):
        return [w for w in self.workers if w.alive and not w.retiring]

    def autoscale(self):
        """Retires the workers that finished what they held; when a decision is due, adds or retires workers."""
        for w in self.workers:
            if w.retiring and w.alive and not w.items and not w.backlog:
                self.pool.retire(w)
        now = time.monotonic()
        if not self.tuner.due(now):
            return
        active = self.active()
        new = self.tuner.tick(
            now,
            self.ring.stats()["consumer_wait_s"],
            sum(w.busy for w in self.workers),
            len(active),
            any(w.ready_at is None for w in active),
            lambda: max((resident_bytes(w.pid) for w in active if w.ready_at), default=0),
        )
        if new is None:
            return
        if new > len(active):
            for _ in range(new - len(active)):
                self.watch_worker(self.pool.add())
        else:  # the last started go first; the order of the batches is the sampler's, whoever writes them
            ready = sorted((w for w in active if w.ready_at is not None), key=lambda w: -w.id)
            for w in ready[: len(active) - new]:
                w.retiring = True
        self.handout.split = new

    # ---- what the Feeder reports --------------------------------------------------------------

    def state_dict(self) -> dict:
        return self.schedule.state_dict()

    def activity(self) -> str:
        workers = self.workers if self.tuner is None else self.active()  # retired workers are no longer counted
        count = self.n if self.tuner is None else len(workers)
        return self.watch.activity(workers, count, self.feeder.produced, self.results.last_commit)

    def stats(self) -> dict:
        now = self.ended or time.perf_counter()
        busy = []
        for w in self.workers:
            elapsed = now - w.ready_at if w.ready_at else 0.0
            busy.append(min(1.0, w.busy / elapsed) if elapsed > 0 else 0.0)
        first = min((w.ready_at for w in self.workers if w.ready_at), default=None)
        elapsed = now - first if first else 0.0  # since the first worker could produce
        samples = self.results.samples if self.mode == "map" else sum(w.samples for w in self.workers)
        out = {
            "workers": len(self.active()) if self.tuner is not None and self.workers else self.n,
            "elements": self.feeder.produced,
            "samples": samples,
            "busy": float(sum(busy) / len(busy)) if busy else 0.0,
            "worker_busy": busy,
            "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
            "startup_s": (self.results.all_ready - self.started) if self.results.all_ready and self.started else None,
            "pids": [w.pid for w in self.workers],
            # Bytes of the pickled dataset each worker is sent (0 with fork: it inherits it).
            "payload_bytes": len(self.pool.payload) if isinstance(self.pool.payload, bytes) else 0,
            "start_method": self.context.get_start_method(),
        }
        if self.mode == "map":
            out["batches_per_epoch"] = self.schedule.sampler.batches_per_epoch
        if self.tuner is not None:
            out["auto"] = self.tuner.log.as_dict()
        return out
