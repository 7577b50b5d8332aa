"""What a Feeder's own thread spends: its processor time and its waits for the GIL (``Feeder.stats()``).

A Feeder over a Python iterable needs the GIL once per element, to run the
user's ``next()``; its copy into the queue runs without it.  While the
training loop's thread holds the GIL through its steps (Theano's VM does),
the Feeder's thread waits for it after every put: the engine counts those
waits (``Ring.gil_wait``) and the consumer's dequeue hands the GIL over to a
producer that waits for it.  When the waits take most of the thread's
time and the consumer still waits for data, the GIL is the limit: an array
dataset (gathered without the GIL) or ``workers=N`` (other processes) is
the way past it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

#: ``gil_bound`` is True past this share of the thread's wall time spent waiting for the GIL.
GIL_BOUND_SHARE = 0.5


class ThreadClock:
    """The producing thread's processor time and the queue's producer GIL waits, since :meth:`enter`."""

    def __init__(self, ring: Any) -> None:
        self.ring = ring
        self.clock_id: Optional[int] = None
        self.cpu_s: Optional[float] = None  # the thread's total once it has ended
        self.entered: Optional[float] = None
        self.left: Optional[float] = None
        self.gil_base: tuple = (0.0, 0)

    def enter(self) -> None:
        """In the producing thread, as it starts."""
        self.entered = time.perf_counter()
        self.gil_base = self.ring.gil_wait()
        try:
            self.clock_id = time.pthread_getcpuclockid(threading.get_ident())
        except (AttributeError, OSError):  # not on every platform
            self.clock_id = None

    def leave(self) -> None:
        """In the producing thread, as it ends."""
        if self.entered is not None and self.left is None and self.clock_id is not None:
            self.cpu_s = time.clock_gettime(self.clock_id)
            self.left = time.perf_counter()

    def stats(self) -> dict:
        """``thread_cpu_s``, ``gil_wait_s``, ``gil_waits``, ``gil_wait_share``, ``gil_bound`` ({} before it starts)."""
        if self.entered is None:
            return {}
        wall = (self.left or time.perf_counter()) - self.entered
        seconds, count = self.ring.gil_wait()
        gil_wait_s, gil_waits = seconds - self.gil_base[0], count - self.gil_base[1]
        share = gil_wait_s / wall if wall > 0 else 0.0
        out = {
            "gil_wait_s": gil_wait_s,
            "gil_waits": gil_waits,
            "gil_wait_share": share,
            "gil_bound": share > GIL_BOUND_SHARE,
        }
        cpu = self.cpu_s
        if cpu is None and self.clock_id is not None:
            try:
                cpu = time.clock_gettime(self.clock_id)
            except OSError:  # the thread has just ended
                cpu = None
        if cpu is not None:
            out["thread_cpu_s"] = cpu
        return out
