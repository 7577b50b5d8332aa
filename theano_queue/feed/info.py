"""Which worker process this code runs in: :func:`worker_info` (set by the worker's main)."""

from __future__ import annotations

import collections

WorkerInfo = collections.namedtuple("WorkerInfo", "id count")
_info = None


def worker_info() -> WorkerInfo:
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


def set_worker_info(wid: int, count: int) -> None:
    global _info
    _info = WorkerInfo(wid, count)
