"""The worker processes of one Feeder: started, watched, stopped.

Workers are started with ``spawn`` unless told otherwise (``fork``,
``forkserver``, or a multiprocessing context), with ``THEANO_FLAGS`` forcing
``device=cpu`` and ``CUDA_VISIBLE_DEVICES`` empty: they never initialise
CUDA, even when the main module imports Theano on a GPU.  What they run
(the dataset or iterable) is pickled by reference wherever they can import
it, by value (cloudpickle) where not: :mod:`.payload`.  :meth:`Pool.stop`
asks them to leave, then SIGTERM, then SIGKILL, and releases every descriptor (pipes and process sentinels) at once.
"""

from __future__ import annotations

import atexit
import collections
import multiprocessing
import os
import threading
import time
import weakref
from typing import Any, Deque, Dict, List, Optional

from . import payload
from . import protocol as p
from .child import StagingLayout, worker_main

# Stopping: this long for the workers to leave by themselves, then SIGTERM, then SIGKILL.
STOP_WAIT_S = 0.5
TERM_WAIT_S = 0.4

_environ_lock = threading.Lock()


class _ChildEnvironment:
    """os.environ as a worker must see it, while it is started (spawn and forkserver copy it then)."""

    def __enter__(self):
        _environ_lock.acquire()
        self.saved = {key: os.environ.get(key) for key in ("THEANO_FLAGS", "CUDA_VISIBLE_DEVICES")}
        os.environ.update(p.worker_env())

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _environ_lock.release()


def start_method_context(start_method: Any):
    """The multiprocessing context for ``start_method``: None (spawn), a name, or a context."""
    if start_method is None:
        start_method = "spawn"
    if isinstance(start_method, str):
        try:
            return multiprocessing.get_context(start_method)
        except ValueError:
            raise ValueError(
                "start_method must be 'spawn', 'forkserver', 'fork' or a multiprocessing context, got %r" % start_method
            ) from None
    if hasattr(start_method, "Process") and hasattr(start_method, "get_start_method"):
        return start_method
    raise TypeError("start_method must be a name or a multiprocessing context, got %r" % (start_method,))


def dataset_payload(dataset: Any, context, where: str) -> Any:
    """What a worker is given: the dataset itself for fork, else pickled once (an error now, not in a worker).

    Pickled by reference wherever the workers can import it (:mod:`.payload`),
    and sent over the worker's pipe once the process runs, not among the
    Process arguments: spawn's ``Process.start()`` waits until the child has
    read its arguments, and a large dataset, a busy machine or a main module
    without its ``if __name__ == "__main__":`` guard would hold the feeder
    there, deaf to stop()."""
    method = context.get_start_method()
    if method == "fork":
        return dataset
    payload.refuse_unimportable_main(method, where)
    by_reference = payload.main_imports_in_workers()
    try:
        return payload.dumps(dataset, by_reference)
    except Exception as exc:
        part = payload.culprit(dataset, by_reference)
        raise TypeError(
            "%s: workers need a picklable dataset (start_method=%r sends it to them); %s%s: %s. Leave that "
            "out of the dataset (open it in the worker, e.g. on first use), or use start_method='fork' where "
            "the parent has no CUDA context or threads"
            % (where, method, "cannot pickle %s: " % part if part else "", type(exc).__name__, exc)
        ) from exc


class Worker:
    """The parent's record of one worker process."""

    def __init__(self, wid: int, process, conn):
        self.id, self.process, self.conn = wid, process, conn
        self.pid = process.pid
        self.items: Dict[int, Any] = collections.OrderedDict()  # tag -> item in its hands
        self.backlog: Deque[Any] = collections.deque()  # items for it before it is ready
        self.sender: Optional[threading.Thread] = None  # the thread that sends it the pickled dataset
        self.busy = 0.0
        self.ready_at = None
        self.since = None  # when it began the item it works on (its first in hand)
        self.samples = 0
        self.assigned = 0  # elements of its stream handed out (iterable datasets)
        self.exhausted = False
        self.alive = True
        # workers="auto" retires it: it is handed nothing new, finishes what it holds, then is told to stop.
        self.retiring = False
        # Start-up: what it does (protocol.PHASES), since when, and when it last showed progress (a phase
        # begun, or processor time used: an import that runs long is not a hang, a stopped process is).
        self.phase = p.IMPORTING
        self.started_at = self.progress_at = time.monotonic()
        self.cpu_ticks = -1


def process_status(pid: int):
    """(processor time in clock ticks, state letter) of a process, from /proc; (-1, "?") where unreadable."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return -1, "?"
    return int(fields[11]) + int(fields[12]), fields[0].decode()


#: What /proc says a process's state letter means, for messages.
PROCESS_STATES = {
    "R": "running",
    "S": "sleeping (waiting for something)",
    "D": "in uninterruptible I/O",
    "T": "stopped (SIGSTOP or a debugger)",
    "t": "stopped by a debugger",
    "Z": "a zombie",
}


def _send_quietly(conn, payload):
    try:
        conn.send_bytes(payload)
    except (OSError, ValueError):
        pass  # the worker died or was stopped; its sentinel tells


_live: weakref.WeakSet[Pool] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit():
    """Interpreter exit: no worker outlives the process that started it."""
    for pool in list(_live):
        if pool.owner == os.getpid():  # not in a child forked by the user: its parent's workers are not its own
            pool.kill()


class Pool:
    """``n`` worker processes writing into the shared staging of ``ring``."""

    def __init__(self, n: int, context, payload: Any, name: str, most: Optional[int] = None):
        """``n`` workers to start; ``most`` the most it may hold (workers="auto" adds some while it runs)."""
        self.n, self.context, self.payload, self.name = n, context, payload, name
        self.most = max(n, most or n)
        self.workers: List[Worker] = []
        self.owner = os.getpid()
        self.stopped = False
        self.launch: Optional[tuple] = None  # what start() was given, for add()
        # The sample each worker is on (shared memory it writes, -1 for none): a timeout names the one that hangs.
        self.current = context.RawArray("q", [-1] * self.most)

    def start(self, ring, queue_layout, mode: str, config: dict, skips: Optional[list]) -> List[Worker]:
        self.launch = (ring, queue_layout, mode, config, skips)
        _live.add(self)
        self.spawn(self.n)
        return self.workers

    def add(self) -> Worker:
        """One more worker (numbered after the others), started as start() started them."""
        self.spawn(1)
        return self.workers[-1]

    def spawn(self, count: int) -> None:
        assert self.launch is not None, "start() first"
        ring, queue_layout, mode, config, skips = self.launch
        fd = ring.staging_fd()
        layout = StagingLayout(queue_layout, ring.component_offsets, ring.staging_bytes)
        parent = os.getpid() if self.context.get_start_method() in ("fork", "spawn") else None
        pickled = isinstance(self.payload, bytes)
        first = len(self.workers)
        if first + count > self.most:
            raise ValueError("%s: %d workers at most" % (self.name, self.most))
        try:
            with _ChildEnvironment():
                for wid in range(first, first + count):
                    mine, theirs = self.context.Pipe(duplex=True)
                    process = self.context.Process(
                        target=worker_main,
                        name="%s worker %d" % (self.name, wid),
                        daemon=True,
                        args=(
                            wid,
                            self.most,
                            theirs,
                            p.SharedFd(fd),
                            layout,
                            None if pickled else self.payload,
                            mode,
                            config,
                            os.getpid(),
                            parent,
                            self.current,
                        ),
                    )
                    process.start()
                    theirs.close()
                    worker = Worker(wid, process, mine)
                    worker.assigned = skips[wid] if skips is not None else 0
                    if pickled:
                        worker.sender = threading.Thread(
                            target=_send_quietly,
                            args=(mine, self.payload),
                            name="%s sender %d" % (self.name, wid),
                            daemon=True,
                        )
                        worker.sender.start()
                    self.workers.append(worker)
        finally:
            os.close(fd)

    def retire(self, w: Worker) -> None:
        """``w`` has finished what it held: told to stop (its exit is no failure), joined by stop()."""
        w.alive = False
        try:
            w.conn.send_bytes(bytes([p.STOP]))
        except (OSError, ValueError):
            pass

    def kill(self) -> None:
        """SIGTERM, then SIGKILL, to every worker still running; they count as dead afterwards."""
        for w in self.workers:
            w.alive = False
        for signal_name in ("terminate", "kill"):
            alive = [w.process for w in self.workers if _running(w.process)]
            if not alive:
                return
            for process in alive:
                try:
                    getattr(process, signal_name)()
                except (OSError, ValueError, AttributeError):
                    pass
            deadline = time.monotonic() + TERM_WAIT_S
            for process in alive:
                process.join(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Stops every worker (asked, then SIGTERM, then SIGKILL; within about 1 s) and releases every
        descriptor of theirs.  Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        for w in self.workers:
            if w.ready_at is None:
                continue  # still starting (its pipe may carry the dataset): it is terminated below
            try:
                w.conn.send_bytes(bytes([p.STOP]))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + STOP_WAIT_S
        for w in self.workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
        self.kill()
        for w in self.workers:
            if w.sender is not None:
                # Its child is gone, so a send still under way ends with a broken pipe;
                # closing the pipe under it could close a descriptor reused meanwhile.
                w.sender.join(TERM_WAIT_S)
            w.conn.close()
            try:
                w.process.close()  # its sentinel's descriptor, now rather than at the next gc
            except ValueError:
                pass  # still running after SIGKILL (uninterruptible): left to the gc
        _live.discard(self)


def _running(process) -> bool:
    try:
        return process.exitcode is None
    except ValueError:  # closed
        return False
