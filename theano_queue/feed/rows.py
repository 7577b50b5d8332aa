"""Samples of a map-style dataset written into the rows of a slot, through the one door (:mod:`.check`).

The same code runs in the Feeder's thread and in worker processes.
"""

from __future__ import annotations

import traceback
from typing import Any, Sequence

from ..core.errors import FeederError
from .check import write_sample


def row_type(names):
    """A tuple type for one row's views that is also indexed by component name."""
    index = {name: i for i, name in enumerate(names)}

    class Row(tuple):
        """Writable views of one row of a slot, one per component.

        ``x, y = row``, ``row[0]`` and ``row["x"]`` all work; ``row.keys()``
        gives the component names.
        """

        __slots__ = ()

        def __getitem__(self, key):
            if isinstance(key, str):
                try:
                    key = index[key]
                except KeyError:
                    raise KeyError("no component %r; the components are %s" % (key, list(names))) from None
            return tuple.__getitem__(self, key)

        def keys(self):
            return list(names)

        def items(self):
            return list(zip(names, self))

    return Row


class SampleError(Exception):
    """Internal: producing sample ``index`` raised (the cause)."""

    def __init__(self, index: int):
        super().__init__(index)
        self.index = index


class RowWriter:
    """Writes samples of ``dataset`` into rows of slots laid out as ``layout`` (a :class:`~..layout.Layout`)."""

    def __init__(self, layout, dataset: Any, queue_name: str):
        self.layout = layout
        self.dataset = dataset
        self.queue_name = queue_name
        self.read_into = getattr(dataset, "read_into", None)
        self.Row = row_type([c.name for c in layout.components])

    def fill(self, views: Sequence, row0: int, indices: Sequence[int]) -> None:
        """Writes the samples ``indices`` into rows ``row0, row0 + 1, ...`` of the slot's engine ``views``.

        On failure raises :class:`SampleError` naming the index.
        """
        Row, read_into, dataset, layout, name = self.Row, self.read_into, self.dataset, self.layout, self.queue_name
        arrays, lengths = layout.staged(views, reset_lengths=False)
        for r, index in enumerate(indices, row0):
            try:
                row = Row([view[r, ...] for view in arrays])
                if read_into is not None:
                    read_into(index, row)
                else:
                    write_sample(layout, row, dataset[index], lengths, r, name)
            except Exception as exc:
                raise SampleError(index) from exc

    def pack(self, views: Sequence, rows: int) -> list:
        """The engine rows of a slot whose first ``rows`` rows are written (variable-length ones packed)."""
        return self.layout.finish(views, [rows] * len(self.layout.components), self.queue_name)


def sample_failed(message: str, index=None, worker=None, worker_traceback=None, cause=None) -> FeederError:
    """The FeederError that reports a failed sample, carrying where it happened."""
    exc = FeederError(message)
    exc.index, exc.worker, exc.worker_traceback = index, worker, worker_traceback
    exc.__cause__ = cause
    return exc


def describe_failure(cause: BaseException) -> str:
    return "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
