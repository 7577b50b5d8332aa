"""Worker processes that write samples straight into a queue's slots.

Every slot's staging lies in one shared block of memory (a memfd) that the
engine allocates; on a GPU queue it is page-locked in the parent with
``cuMemHostRegister``.  Workers map it through its file descriptor and write
each sample into its row of the slot: the only host copy between a sample and
the device is the worker's own write (none with ``read_into``).

The parent runs two threads of its own:

* the *reserver* takes free slots from the ring (in ring order), waiting
  without the GIL and without limit; the dispatcher's wind-down wakes it
  (an ``_engine.Stop`` of its own), so nothing polls the ring;
* the *dispatcher* (the Feeder's thread) gives each reserved slot the next
  batch, cuts it into row ranges, one work item per range, hands the items to
  the least busy workers, and commits a slot when all its rows are written.
  It waits on the workers' pipes and their process sentinels at once, so a
  worker that dies is noticed at once.

Order: slots are reserved in batch order, and with ``ordered=True`` a slot is
committed only after every earlier one, so the consumer sees batches in order
whatever the workers' timing.  With ``ordered=False`` a finished batch is
committed at once through the earliest reserved slot (the engine swaps the two
slots' staging), so whichever batch is done first goes first.

Workers never touch the queue's Ring (with ``fork`` they inherit it, and the
engine refuses a Ring of another process): only the staging they map.

Workers are started with ``spawn`` unless told otherwise (``fork``,
``forkserver``, or a multiprocessing context), with ``THEANO_FLAGS`` forcing
``device=cpu`` and ``CUDA_VISIBLE_DEVICES`` empty: they never initialise CUDA,
even when the main module imports Theano on a GPU.  They ignore SIGINT (Ctrl-C
is the parent's to handle), die with their parent (``PR_SET_PDEATHSIG`` and a
watch on the parent's pidfd), and are stopped by the Feeder within 2 s.
"""
import atexit
import collections
import ctypes
import math
import mmap
import multiprocessing
import multiprocessing.connection as mp_connection
import os
import pickle
import random
import select
import selectors
import signal
import struct
import threading
import time
import traceback
import weakref
from multiprocessing import reduction

import numpy as np

from . import _engine
from .datasets import Progress, RowWriter, SampleError, iterable_state, stream, worker_failed, write_batch
from .errors import QueueClosed, QueueError, Stopped
from .sampler import split_rows

WorkerInfo = collections.namedtuple("WorkerInfo", "id count")
_info = None


def worker_info():
    """``(id, count)`` of the worker process this runs in: ``id`` in ``range(count)``.

    ``(0, 1)`` outside a worker (in the main process, or a Feeder without
    workers), so that a source that splits itself by it produces everything
    there.  An iterable dataset given to ``Feeder(..., workers=N)`` runs once
    in each of the N workers; it uses this to produce its own part::

        def __iter__(self):
            me, count = tq.worker_info()
            for i in range(me, len(self.files), count):
                yield load_batch(self.files[i])
    """
    return _info if _info is not None else WorkerInfo(0, 1)


# ---- messages ---------------------------------------------------------------------------
# Parent -> worker: one kind byte, then a struct.  Worker -> parent: _REPLY, then a payload.
_MAP, _ITER, _STOP = 1, 2, 3
_MAP_ITEM = struct.Struct("<Bqqqq")  # kind, tag, slot offset, first row, rows; then int64 indices
_ITER_ITEM = struct.Struct("<Bqq")  # kind, tag, slot offset
_READY, _DONE, _END, _ERROR = 1, 2, 3, 4
_REPLY = struct.Struct("<Bqqd")  # kind, tag, index (pid for READY), busy seconds; DONE of ITER: int64 rows

# A worker gets at most this many items ahead of the one it is working on.
_DEPTH = 2
# After a failure, earlier batches still in the workers' hands get this long to arrive.
_FAIL_GRACE_S = 0.5
# Stopping: this long for the workers to leave by themselves, then SIGTERM, then SIGKILL.
_STOP_WAIT_S = 0.5
_TERM_WAIT_S = 0.4


# ---- the worker process --------------------------------------------------------------------

class SharedFd:
    """A file descriptor handed to a worker: duplicated into spawn/forkserver children, inherited by fork."""

    def __init__(self, fd):
        self.fd = fd

    def __reduce__(self):
        return _rebuild_fd, (reduction.DupFd(self.fd),)

    def detach(self):
        return self.fd


def _rebuild_fd(dup):
    return SharedFd(dup.detach())


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid):
    """SIGKILL when the process (thread) that started us ends; exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def _watch_owner(owner_pid):
    """A thread that ends this process once the Feeder's process is gone (forkserver: not our parent)."""

    def watch():
        try:
            fd = os.pidfd_open(owner_pid)
        except ProcessLookupError:
            os._exit(1)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            select.select([fd], [], [])
            os._exit(1)
        while True:  # no pidfd: poll
            time.sleep(0.2)
            try:
                os.kill(owner_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="tq-owner-watch", daemon=True).start()


class _Layout:
    """Where the (engine's) components of a slot lie in the shared staging, and views of them.

    ``queue_layout`` is the queue's :class:`~theano_queue.layout.Layout`: the
    user's components, which samples and batches are written as.
    """

    def __init__(self, queue_layout, component_offsets, staging_bytes):
        self.queue_layout = queue_layout
        self.components = queue_layout.engine
        self.offsets = component_offsets
        self.bytes = staging_bytes

    def views(self, buffer, slot_offset):
        return tuple(np.ndarray(c.shape, c.dtype, buffer, slot_offset + off)
                     for c, off in zip(self.components, self.offsets))


def _worker_main(wid, count, conn, staging, layout, dataset, mode, config, owner_pid, parent_pid):
    """The body of a worker process: map the staging, then serve work items until told to stop."""
    global _info
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with_parent(parent_pid)
    _watch_owner(owner_pid)
    os.environ.update(_worker_env())
    _info = WorkerInfo(wid, count)
    try:
        fd = staging.detach()
        buffer = mmap.mmap(fd, layout.bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)
        if dataset is None:  # pickled, it comes over the pipe (Process.start() would wait for us to read it)
            dataset = pickle.loads(conn.recv_bytes())
        seed = np.random.SeedSequence([config["seed"], wid]).generate_state(2)
        random.seed(int(seed[0]))
        np.random.seed(int(seed[1]))
        if mode == "map":
            writer = RowWriter(layout.queue_layout, dataset, config["queue"])
        else:
            timer = _Timer()
            elements = stream(dataset, config["epochs"], config["skip"][wid], timer)
    except BaseException as exc:  # reported, then this worker is of no use
        _reply_error(conn, -1, -1, exc)
        return
    conn.send_bytes(_REPLY.pack(_READY, 0, os.getpid(), 0.0))
    views = {}
    produced = config["skip"][wid] if mode == "iter" else 0
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the parent is gone
        began = time.perf_counter()
        kind = message[0]
        if kind == _STOP:
            return
        if kind == _MAP:
            _, tag, offset, row0, rows = _MAP_ITEM.unpack_from(message)
            indices = np.frombuffer(message, np.int64, rows, _MAP_ITEM.size).tolist()
            slot = views.get(offset) or views.setdefault(offset, layout.views(buffer, offset))
            try:
                writer.fill(slot, row0, indices)
            except SampleError as exc:
                _reply_error(conn, tag, exc.index, exc.__cause__)
                continue
            conn.send_bytes(_REPLY.pack(_DONE, tag, 0, time.perf_counter() - began))
        else:
            _, tag, offset = _ITER_ITEM.unpack_from(message)
            slot = views.get(offset) or views.setdefault(offset, layout.views(buffer, offset))
            timer.busy = 0.0
            try:
                element = next(elements)
                rows = write_batch(layout.queue_layout, slot, element, config["queue"])
            except StopIteration:
                conn.send_bytes(_REPLY.pack(_END, tag, produced, 0.0))
                continue
            except Exception as exc:
                _reply_error(conn, tag, produced, exc)
                continue
            produced += 1
            conn.send_bytes(_REPLY.pack(_DONE, tag, 0, time.perf_counter() - began)
                            + np.asarray(rows, np.int64).tobytes())


class _Timer:
    busy = 0.0


def _reply_error(conn, tag, index, exc):
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001  (a broken __str__ must not hide the failure)
        message = "<unprintable %s>" % type(exc).__name__
    conn.send_bytes(_REPLY.pack(_ERROR, tag, index, 0.0) + pickle.dumps((type(exc).__name__, message, text)))


def _worker_env():
    """What a worker's environment must say so that it never initialises CUDA."""
    flags = [f for f in os.environ.get("THEANO_FLAGS", "").split(",")
             if f and not f.strip().startswith(("device=", "init_gpu_device=", "contexts="))]
    return {"THEANO_FLAGS": ",".join(flags + ["device=cpu"]), "CUDA_VISIBLE_DEVICES": ""}


_environ_lock = threading.Lock()


class _ChildEnvironment:
    """os.environ as a worker must see it, while it is started (spawn and forkserver copy it then)."""

    def __enter__(self):
        _environ_lock.acquire()
        self.saved = {key: os.environ.get(key) for key in ("THEANO_FLAGS", "CUDA_VISIBLE_DEVICES")}
        os.environ.update(_worker_env())

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _environ_lock.release()


def start_method_context(start_method):
    """The multiprocessing context for ``start_method``: None (spawn), a name, or a context."""
    if start_method is None:
        start_method = "spawn"
    if isinstance(start_method, str):
        try:
            return multiprocessing.get_context(start_method)
        except ValueError:
            raise ValueError("start_method must be 'spawn', 'forkserver', 'fork' or a multiprocessing context, "
                             "got %r" % start_method) from None
    if hasattr(start_method, "Process") and hasattr(start_method, "get_start_method"):
        return start_method
    raise TypeError("start_method must be a name or a multiprocessing context, got %r" % (start_method,))


def dataset_payload(dataset, context):
    """What a worker is given: the dataset itself for fork, else pickled once (an error now, not in a worker).

    Pickled, it is sent over the worker's pipe once the process runs, not
    among the Process arguments: spawn's ``Process.start()`` waits until the
    child has read its arguments, and a large dataset, a busy machine or a
    main module without its ``if __name__ == "__main__":`` guard would hold
    the feeder there, deaf to stop()."""
    if context.get_start_method() == "fork":
        return dataset
    try:
        return pickle.dumps(dataset, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TypeError("Feeder: workers need a picklable dataset (start_method=%r pickles it); %s: %s. Make it "
                        "picklable, or use start_method='fork' where the parent has no CUDA context or threads"
                        % (context.get_start_method(), type(exc).__name__, exc)) from exc


# ---- the parent side -------------------------------------------------------------------------

class _Worker:
    def __init__(self, wid, process, conn):
        self.id, self.process, self.conn = wid, process, conn
        self.items = collections.OrderedDict()  # tag -> item in its hands
        self.backlog = collections.deque()  # items for it before it is ready (iterable datasets)
        self.sender = None  # the thread that sends it the pickled dataset
        self.busy = 0.0
        self.ready_at = None
        self.samples = 0
        self.assigned = 0  # elements of its stream handed out (iterable datasets)
        self.exhausted = False
        self.alive = True


def _send_quietly(conn, payload):
    try:
        conn.send_bytes(payload)
    except (OSError, ValueError):
        pass  # the worker died or was stopped; its sentinel tells


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


_live = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit():
    """Interpreter exit: no worker outlives the process that started it."""
    for producer in list(_live):
        if producer.owner != os.getpid():
            continue  # a child forked by the user: the parent's workers and ring are not its own
        if producer.stop_event is not None:
            producer.stop_event.set()
        producer.kill_workers()


class WorkerProducer:
    """Feeds a queue from ``workers`` processes; the Feeder's thread runs :meth:`run`.

    ``mode`` is "map" (a map-style dataset; ``sampler`` and ``cursor`` say
    which batches) or "iter" (an iterable run in every worker; ``skips`` says
    how many elements of each worker's stream were consumed before a resume).
    """

    def __init__(self, feeder, queue, dataset, workers, mode, *, sampler=None, cursor=None, skips=None,
                 epochs=1, seed=0, ordered=True, start_method=None):
        self.feeder, self.queue, self.ring = feeder, queue, queue._ring
        self.n, self.mode, self.ordered = workers, mode, ordered
        self.sampler, self.start_cursor = sampler, cursor
        self.consumed = cursor.copy() if cursor is not None else None
        self.skips = list(skips) if skips is not None else [0] * workers
        self.consumed_counts = list(self.skips)
        self.context = start_method_context(start_method)
        self.payload = dataset_payload(dataset, self.context)
        self.config = {"seed": seed, "epochs": epochs, "skip": self.skips, "queue": queue.name}
        self.components = queue._layout.engine  # what the slots hold: the engine's components
        self.queue_layout = queue._layout
        self.staging = None  # the parent's map of the staging, to pack variable-length rows at commit
        self.progress = Progress(queue)
        self.workers = []
        self.order = collections.deque()  # batches of reserved slots, in ring order
        self.todo = collections.deque()  # items not yet handed to a worker
        self.posted = collections.deque()  # slots the reserver took, not yet given a batch
        self.seq = 0
        self.tags = 0
        self.more = True  # batches left to hand out
        self.failure = None  # (exception, first batch seq it spoils, deadline)
        self.samples = 0
        self.started = self.all_ready = self.ended = None
        self.stop_event = None
        self.winding_down = self.shut = False
        self.reserver = None
        # Ends the reserver's wait for a free slot (it waits without limit) when the run winds down.
        self.reserver_stop = _engine.Stop(self.ring)
        self.owner = os.getpid()
        self.wake_r = self.wake_w = None
        self.positions = sampler.pending(cursor) if mode == "map" else None
        self.next_position = next(self.positions, None) if mode == "map" else None
        if mode == "map" and self.next_position is None:
            self.more = False

    # ---- life ---------------------------------------------------------------------------

    def start(self):
        self.progress.start()

    def run(self, stop):
        """Produce until done (True), stopped (False) or failed (raises FeederError)."""
        self.stop_event = stop
        self.started = time.perf_counter()
        # Children inherit this thread's signal mask: blocked SIGINT until they ignore it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        _live.add(self)
        try:
            self._start_workers()
            self.wake_r, self.wake_w = os.pipe()
            os.set_blocking(self.wake_r, False)
            self.reserver = threading.Thread(target=self._reserve_loop, name=self.feeder.name + " reserver",
                                             daemon=True)
            self.reserver.start()
            return self._loop()
        finally:
            self.ended = time.perf_counter()
            self._give_slots_back()

    def _start_workers(self):
        fd = self.ring.staging_fd()
        layout = _Layout(self.queue_layout, self.ring.component_offsets, self.ring.staging_bytes)
        if self.mode == "map" and self.queue_layout.varying:
            # Workers write rows at their bounds; the parent packs the element before it commits it.
            self.staging = (layout, mmap.mmap(fd, layout.bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
        parent = os.getpid() if self.context.get_start_method() in ("fork", "spawn") else None
        try:
            with _ChildEnvironment():
                for wid in range(self.n):
                    mine, theirs = self.context.Pipe(duplex=True)
                    pickled = isinstance(self.payload, bytes)
                    process = self.context.Process(
                        target=_worker_main, name="%s worker %d" % (self.feeder.name, wid), daemon=True,
                        args=(wid, self.n, theirs, SharedFd(fd), layout, None if pickled else self.payload,
                              self.mode, self.config, os.getpid(), parent))
                    process.start()
                    theirs.close()
                    worker = _Worker(wid, process, mine)
                    worker.assigned = self.skips[wid] if self.mode == "iter" else 0
                    if pickled:
                        worker.sender = threading.Thread(target=_send_quietly, args=(mine, self.payload),
                                                         name="%s sender %d" % (self.feeder.name, wid), daemon=True)
                        worker.sender.start()
                    self.workers.append(worker)
        finally:
            os.close(fd)

    def _give_slots_back(self):
        """Aborts every slot reserved and not committed, each once no live worker writes into it any more.

        A slot given back may be taken by another producer at once: a worker
        still writing rows into its staging would corrupt that element.  So
        the slots whose rows are in workers' hands wait for those items to
        end (or for the workers to be killed, after _STOP_WAIT_S).
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
        deadline = time.monotonic() + _STOP_WAIT_S
        while self.order:
            written = {id(item.batch) for w in self.workers if w.alive for item in w.items.values()}
            for batch in [b for b in self.order if id(b) not in written]:
                self.order.remove(batch)
                self.ring.abort(batch.slot)
            if not self.order:
                break
            if time.monotonic() >= deadline:
                self.kill_workers()
                continue
            busy = [w for w in self.workers if w.alive and w.items]
            ready = mp_connection.wait([w.conn for w in busy] + [w.process.sentinel for w in busy],
                                       max(0.0, deadline - time.monotonic()))
            for w in busy:
                if w.conn in ready:
                    self._read(w)
                if w.process.sentinel in ready:
                    self._died(w)
        for fd in (self.wake_r, self.wake_w):
            if fd is not None:
                os.close(fd)
        self.wake_r = self.wake_w = None

    def shutdown(self):
        """Stops every worker: asked, then SIGTERM, then SIGKILL; within about 1 s.  Idempotent."""
        if self.shut:
            return
        self.shut = True
        for w in self.workers:
            if w.ready_at is None:
                continue  # still starting (its pipe may carry the dataset): it is terminated below
            try:
                w.conn.send_bytes(bytes([_STOP]))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + _STOP_WAIT_S
        for w in self.workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
        self.kill_workers()
        for w in self.workers:
            if w.sender is not None:
                # Its child is gone, so a send still under way ends with a broken pipe;
                # closing the pipe under it could close a descriptor reused meanwhile.
                w.sender.join(_TERM_WAIT_S)
            w.conn.close()
        _live.discard(self)

    def kill_workers(self):
        """SIGTERM, then SIGKILL, to every worker still running; they count as dead afterwards."""
        for w in self.workers:
            w.alive = False
        for sig_wait in (("terminate", _TERM_WAIT_S), ("kill", _TERM_WAIT_S)):
            alive = [w.process for w in self.workers if w.process.exitcode is None]
            if not alive:
                return
            for process in alive:
                try:
                    getattr(process, sig_wait[0])()
                except (OSError, ValueError, AttributeError):
                    pass
            deadline = time.monotonic() + sig_wait[1]
            for process in alive:
                process.join(max(0.0, deadline - time.monotonic()))

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
            kind, tag, index, busy = _REPLY.unpack_from(message)
            w.busy += busy
            if kind == _READY:
                w.ready_at = time.perf_counter()
                if all(x.ready_at for x in self.workers):
                    self.all_ready = w.ready_at
                while w.backlog and w.alive:
                    self._send(w, w.backlog.popleft())
                continue
            item = w.items.pop(tag, None)
            if kind == _ERROR:
                name, text, tb = pickle.loads(message[_REPLY.size:])
                where = ("failed to start" if tag < 0 else
                         "raised on sample %d" % index if self.mode == "map" else
                         "raised on element %d of its stream" % index)
                exc = worker_failed("worker %d %s: %s: %s\n\nTraceback in the worker:\n%s"
                                    % (w.id, where, name, text, tb.rstrip()), index if tag >= 0 else None,
                                    w.id, tb)
                self._fail_later(exc, item.batch.seq if item is not None else -1)
                continue
            if item is None:
                continue
            batch = item.batch
            if kind == _END:
                w.exhausted = True
                self._drop(batch)
                if all(x.exhausted for x in self.workers if x.alive):
                    self.more = False
                continue
            if self.mode == "iter":
                batch.rows = np.frombuffer(message, np.int64, len(self.components), _REPLY.size).tolist()
                w.samples += 1
            else:
                done = _MAP_ITEM.unpack_from(item.message)[4]
                w.samples += done
                self.samples += done
            batch.remaining -= 1
            if batch.remaining == 0:
                batch.complete = True

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
            first = next(iter(w.items.values()))
            doing = " while producing %s" % self._describe(first)
        elif w.ready_at is None:
            doing = (" while starting (see its output above; with spawn or forkserver the main module is imported "
                     "again in the worker: guard the script's entry point with if __name__ == '__main__':)")
        exc = worker_failed("worker %d (pid %s) %s%s" % (w.id, w.process.pid, how, doing), worker=w.id)
        seqs = [item.batch.seq for item in list(w.items.values()) + list(w.backlog)]
        self._fail_later(exc, min(seqs) if seqs else self.seq)

    def _describe(self, item):
        if self.mode == "map":
            _, _, _, row0, rows = _MAP_ITEM.unpack_from(item.message)
            indices = np.frombuffer(item.message, np.int64, rows, _MAP_ITEM.size)
            return "samples %s of batch %d of epoch %d" % (
                indices.tolist() if rows <= 8 else "%s..." % indices[:8].tolist(),
                item.batch.key % self.sampler.batches_per_epoch, self.sampler.epoch_of(item.batch.key))
        return "element %d of its stream" % item.batch.key[1]

    # ---- batches and items -------------------------------------------------------------------

    def _assign(self, slot):
        """Gives a freshly reserved slot its batch (in ring order), or gives the slot back."""
        if self.failure is not None or not self.more:
            self.ring.abort(slot)
            return
        offset = self.ring.slot_offset(slot)
        if self.mode == "map":
            position = self.next_position
            self.next_position = next(self.positions, None)
            self.more = self.next_position is not None
            indices = self.sampler.batch(position)
            batch = _Batch(self.seq, position, slot, offset, len(indices))
            self.seq += 1
            self.order.append(batch)
            for row0, row1 in split_rows(len(indices), self.n):
                self.tags += 1
                message = _MAP_ITEM.pack(_MAP, self.tags, offset, row0, row1 - row0) + indices[row0:row1].tobytes()
                self.todo.append(_Item(self.tags, batch, message))
                batch.remaining += 1
        else:
            candidates = [w for w in self.workers if w.alive and not w.exhausted]
            if not candidates:
                self.more = False
                self.ring.abort(slot)
                return
            if self.ordered:  # round robin: the stream that has given the fewest elements
                w = min(candidates, key=lambda x: (x.assigned, x.id))
            else:
                w = min(candidates, key=lambda x: (len(x.items), x.id))
            batch = _Batch(self.seq, (w.id, w.assigned), slot, offset, None)
            self.seq += 1
            self.order.append(batch)
            w.assigned += 1
            self.tags += 1
            batch.remaining = 1
            self._send(w, _Item(self.tags, batch, _ITER_ITEM.pack(_ITER, self.tags, offset)))

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
        w.items[item.tag] = item
        try:
            w.conn.send_bytes(item.message)
        except (OSError, ValueError):
            self._died(w)

    def _drop(self, batch):
        """An iterable worker had no element for this slot: give it back."""
        self.order.remove(batch)
        self.ring.abort(batch.slot)

    def _rows(self, batch):
        if self.mode == "iter":
            return batch.rows  # the worker packed the batch and counted the engine's rows
        if self.staging is None:
            return [batch.rows] * len(self.components)
        layout, buffer = self.staging
        views = layout.views(buffer, self.ring.slot_offset(batch.slot))  # the slot's staging now (after any swap)
        return self.queue_layout.finish(views, [batch.rows] * len(self.queue_layout.components), self.queue.name)

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
        rows = self._rows(batch)
        with self.progress.lock:
            self.progress.log.append(batch.key)
        self.order.popleft()
        self.ring.commit(batch.slot, rows)
        self.feeder.produced += 1

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
        self.queue.fail(self.failure[0])
        raise self.failure[0]

    # ---- what the Feeder reports --------------------------------------------------------------

    def state_dict(self):
        with self.progress.lock:
            for key in self.progress.consumed_keys():
                if self.mode == "map":
                    self.consumed.add(key)
                else:
                    self.consumed_counts[key[0]] += 1
            if self.mode == "map":
                return self.sampler.state_dict(self.consumed)
            return iterable_state(self.consumed_counts)

    def stats(self):
        now = self.ended or time.perf_counter()
        busy = []
        for w in self.workers:
            elapsed = now - w.ready_at if w.ready_at else 0.0
            busy.append(min(1.0, w.busy / elapsed) if elapsed > 0 else 0.0)
        first = min((w.ready_at for w in self.workers if w.ready_at), default=None)
        elapsed = now - first if first else 0.0  # since the first worker could produce
        samples = self.samples if self.mode == "map" else sum(w.samples for w in self.workers)
        out = {"workers": self.n, "elements": self.feeder.produced, "samples": samples,
               "busy": sum(busy) / len(busy) if busy else 0.0, "worker_busy": busy,
               "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
               "startup_s": (self.all_ready - self.started) if self.all_ready and self.started else None,
               "pids": [w.process.pid for w in self.workers], "start_method": self.context.get_start_method()}
        if self.mode == "map":
            out["batches_per_epoch"] = self.sampler.batches_per_epoch
        return out
