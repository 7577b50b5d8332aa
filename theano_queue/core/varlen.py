"""A variable-length component (:class:`~theano_queue.core.spec.upto` axes) as engine components: its packed data,
its lengths and its extents (the layout is described in :mod:`theano_queue.core.layout`), and :class:`Padded`, a padded
array with its rows' lengths."""

import math
from typing import Any

import numpy as np

from .. import _engine
from . import schema
from .spec import Component

# Rows of at least this many bytes are packed one by one (used bytes only), shorter ones all at once.
ROW_BY_ROW_BYTES = 8192
LENGTHS = "%s.lengths"
EXTENT = "%s.extent%d"
EXTENT_DTYPE = np.dtype("uint8")


class Padded:
    """A variable-length component's value given padded: ``data`` and each row's ``lengths``.

    ``data`` has the component's dimensions, its variable axes at least as
    long as every row's length there; ``lengths`` is one int per row (one row
    of ``k`` ints per row for ``k`` variable axes).  What lies past a row's
    length is not read: the queue pads with the component's ``pad_value``.
    An iterable given to a Feeder yields it where a put would take
    ``lengths=``.  (Not a tuple: a tuple in an element lists components.)
    """

    __slots__ = ("data", "lengths")

    def __init__(self, data: Any, lengths: Any) -> None:
        self.data, self.lengths = data, lengths

    def __repr__(self) -> str:
        return "Padded(data of shape %s, lengths=%r)" % (np.shape(self.data), self.lengths)


class VarlenComponent:
    """One component with variable axes: its engine components, packing and unpacking."""

    def __init__(self, component):
        self.component = component
        self.name = component.name
        self.axes = component.variable_axes
        self.k = len(self.axes)
        shape = tuple(int(n) for n in component.shape)
        self.batch = shape[0]
        self.bounds = shape  # the full shape, every variable axis at its bound
        last = self.axes[-1]
        self.middle = shape[1 : last + 1]  # axes 1..last variable one, their bounds
        self.inner = shape[last + 1 :]  # fixed axes after the last variable one
        self.dtype = component.dtype
        self.pad_value = component.pad_value
        lengths_shape = (self.batch,) if self.k == 1 else (self.batch, self.k)
        self.engine = (
            Component(self.name, self.dtype, (self.batch * math.prod(self.middle),) + self.inner),
            Component(LENGTHS % self.name, np.dtype("int64"), lengths_shape),
        ) + tuple(Component(EXTENT % (self.name, a), EXTENT_DTYPE, (shape[a], 0)) for a in self.axes)

    # ---- shapes -------------------------------------------------------------------------

    def where(self, queue_name):
        return "Queue %r, component %r" % (queue_name, self.name)

    def packed_shape(self, n, extents):
        """``(n, ...)`` with each variable axis at its extent in ``extents``."""
        shape = [n] + list(self.bounds[1:])
        for axis, extent in zip(self.axes, extents):
            shape[axis] = extent
        return tuple(shape)

    def extents(self, lengths):
        """The element's extent on each variable axis: its longest row there (0 without rows)."""
        if len(lengths) == 0:
            return (0,) * self.k
        return tuple(int(v) for v in lengths.reshape(len(lengths), self.k).max(axis=0))

    def engine_rows(self, n, extents):
        """Rows of each engine component for an element of ``n`` rows and these extents."""
        packed = self.packed_shape(n, extents)
        return [math.prod(packed[: len(self.middle) + 1]), n] + list(extents)

    def packed_view(self, data_view, n, extents):
        """The start of the data component's staging, shaped as the packed element."""
        shape = self.packed_shape(n, extents)
        return data_view.reshape(-1)[: math.prod(shape)].reshape(shape)

    def staged_view(self, data_view):
        """The data component's staging shaped as the component at its bounds: rows written at full stride."""
        return data_view.reshape(self.bounds)

    def copy_rows(self, packed, source, lengths):
        """Writes each row of ``source`` (n, >= L..., inner) up to its lengths into ``packed``, pad_value past them.

        Rows of many bytes go one by one, used bytes only (a long tail leaves
        most of a batch padding); many short rows go in one vectorised copy
        and one masked fill.  ``source`` may overlap ``packed`` from behind
        (a slot compacted in place): row i's source lies at or after its
        destination and before row i + 1's source.
        """
        n = len(packed)
        if n == 0 or packed.size == 0:
            return
        along_rows = self.axes == (1,)  # the one variable axis is a row's first: a row's used part is one run
        if (
            along_rows
            and source.dtype == packed.dtype
            and rows_contiguous(source)
            and not np.may_share_memory(packed, source)
        ):
            # In C over the copy pool, with the GIL released: a batch of long
            # rows is as large a copy as a fixed component's.
            _engine.pack_rows(
                packed,
                source[:n],
                np.ascontiguousarray(lengths.reshape(n), np.int64),
                np.asarray(self.pad_value, packed.dtype).reshape(1),
            )
            return
        if along_rows and packed[0].nbytes >= ROW_BY_ROW_BYTES:
            pad = self.pad_value
            for i, length in enumerate(lengths.reshape(n).tolist()):
                packed[i, :length] = source[i, :length]
                packed[i, length:] = pad
            return
        np.copyto(packed, source[(slice(0, n),) + tuple(slice(0, s) for s in packed.shape[1:])])
        self.pad(packed, lengths)

    def pad(self, packed, lengths):
        """Writes ``pad_value`` past each row's length in ``packed`` (n, L..., inner)."""
        n = len(packed)
        if n == 0 or packed.size == 0:
            return
        lengths = lengths.reshape(n, self.k)
        mask = None
        for j, axis in enumerate(self.axes):
            extent = packed.shape[axis]
            if bool((lengths[:, j] == extent).all()):
                continue
            beyond = (np.arange(extent)[None, :] >= lengths[:, j : j + 1]).reshape(
                [n] + [extent if a == axis else 1 for a in range(1, packed.ndim)]
            )
            mask = beyond if mask is None else mask | beyond
        if mask is not None:
            np.copyto(packed, self.pad_value, where=mask)

    # ---- checks ---------------------------------------------------------------------------

    def check_lengths(self, lengths, n, limits, queue_name, what="lengths"):
        """``lengths`` as an int64 (n, k) array, or an error naming the component.

        ``limits`` is the most each variable axis may hold: the padded data's
        extent (whose own extent is at most the bound), or the bound.
        """
        where = self.where(queue_name)
        given = np.asarray(lengths)
        if given.dtype.kind not in "iu" and not (given.size == 0 and given.dtype.kind == "f"):
            raise TypeError("%s: %s must be integers, got dtype %s" % (where, what, given.dtype))
        want = (n,) if self.k == 1 else (n, self.k)
        if given.shape != want and not (self.k == 1 and given.shape == (n, 1)):
            raise ValueError(
                "%s: %s must have shape %s (one per row%s), got %s"
                % (where, what, want, "" if self.k == 1 else ", one per variable axis", given.shape)
            )
        given = given.astype(np.int64).reshape(n, self.k)
        if n and (given < 0).any():
            raise ValueError("%s: %s must not be negative, got %s" % (where, what, int(given.min())))
        for j, axis in enumerate(self.axes):
            longest = int(given[:, j].max()) if n else 0
            if longest > self.bounds[axis]:
                raise ValueError(
                    "%s: a row of length %d on axis %d is longer than the bound upto(%d)"
                    % (where, longest, axis, self.bounds[axis])
                )
            if longest > limits[j]:
                raise ValueError(
                    "%s: %s say a row holds %d on axis %d, but the data there is only %d long"
                    % (where, what, longest, axis, limits[j])
                )
        return given

    def as_array(self, value, queue_name, ndim, what):
        """``value`` as an array with ``ndim`` dimensions whose dtype casts safely to the component's.

        An array keeps its own dtype (the copy into the slot casts it); Python
        values become arrays of the component's dtype.
        """
        where = self.where(queue_name)
        value = schema.component_value(self.component, value, queue_name)  # [] is a row of length 0
        if value.ndim != ndim:
            raise ValueError(
                "%s: expected %s of %d dimensions (shape %s), got shape %s"
                % (where, what, ndim, self.bounds[1:] if what.startswith("row") else self.bounds, value.shape)
            )
        return value

    def check_fixed_axes(self, shape, first_axis, queue_name, what):
        """The fixed (non-upto) axes of ``shape`` must be the component's; ``first_axis`` is shape[0]'s axis."""
        for d, size in enumerate(shape):
            axis = d + first_axis
            if axis > 0 and axis not in self.axes and size != self.bounds[axis]:
                raise ValueError(
                    "%s: %s has shape %s; axis %d must be %d (the component is %s)"
                    % (self.where(queue_name), what, shape, axis, self.bounds[axis], self.component.shape)
                )

    def check_rows(self, n, queue_name):
        if n > self.batch:
            raise ValueError("%s: expected at most %d rows, got %d" % (self.where(queue_name), self.batch, n))

    # ---- host side -----------------------------------------------------------------------

    def prepare(self, value, queue_name):
        """Checks a put's value; returns its rows and a function that writes it into the engine views and gives
        the engine's rows.

        ``value`` is a :class:`Padded`, an array (every row full), or a list
        of per-row arrays of their own lengths.
        """
        if isinstance(value, Padded):
            data = self.as_array(value.data, queue_name, len(self.bounds), "padded data")
            lengths = value.lengths
        elif isinstance(value, (list, tuple)):
            return self.prepare_rows(value, queue_name)
        else:
            data = self.as_array(value, queue_name, len(self.bounds), "an array")
            lengths = None
        n = len(data)
        self.check_rows(n, queue_name)
        self.check_fixed_axes(data.shape, 0, queue_name, "the data")
        limits = [data.shape[a] for a in self.axes]
        if lengths is None:
            for j, axis in enumerate(self.axes):
                if limits[j] > self.bounds[axis]:
                    raise ValueError(
                        "%s: rows of length %d on axis %d are longer than the bound upto(%d)"
                        % (self.where(queue_name), limits[j], axis, self.bounds[axis])
                    )
            lengths = np.tile(np.asarray(limits, np.int64), (n, 1))
        else:
            lengths = self.check_lengths(lengths, n, limits, queue_name)
        extents = self.extents(lengths)

        def write(views):
            data_view, lengths_view = views[0], views[1]
            self.copy_rows(self.packed_view(data_view, n, extents), data, lengths)
            lengths_view[:n] = lengths.reshape(lengths_view[:n].shape)
            return self.engine_rows(n, extents)

        return n, write

    def prepare_rows(self, rows, queue_name):
        """A list of per-row arrays, each with its own lengths on the variable axes."""
        n = len(rows)
        self.check_rows(n, queue_name)
        arrays = []
        for i, row in enumerate(rows):
            row = self.as_array(row, queue_name, len(self.bounds) - 1, "row %d" % i)
            self.check_fixed_axes(row.shape, 1, queue_name, "row %d" % i)
            arrays.append(row)
        lengths = np.array([[r.shape[a - 1] for a in self.axes] for r in arrays], np.int64).reshape(n, self.k)
        lengths = self.check_lengths(
            lengths, n, [b for b in (self.bounds[a] for a in self.axes)], queue_name, "the rows' lengths"
        )
        extents = self.extents(lengths)

        def write(views):
            data_view, lengths_view = views[0], views[1]
            packed = self.packed_view(data_view, n, extents)
            along_rows = self.axes == (1,)
            for i, row in enumerate(arrays):
                packed[(i,) + tuple(slice(0, s) for s in row.shape)] = row
                if along_rows:
                    packed[i, len(row) :] = self.pad_value
            if not along_rows:
                self.pad(packed, lengths)
            lengths_view[:n] = lengths.reshape(lengths_view[:n].shape)
            return self.engine_rows(n, extents)

        return n, write

    def write_row(self, dst, value, queue_name):
        """Writes one sample's array (its own lengths) at the start of its row ``dst`` (at the bounds); its lengths."""
        where = self.where(queue_name)
        value = schema.component_value(self.component, value, queue_name)  # a list as put takes it
        if value.ndim != dst.ndim:
            raise ValueError(
                "%s: a sample must have %d dimensions (the component's without its batch axis, %s), "
                "got shape %s" % (where, dst.ndim, self.component.shape[1:], value.shape)
            )
        self.check_fixed_axes(value.shape, 1, queue_name, "a sample")
        for axis in self.axes:
            if value.shape[axis - 1] > self.bounds[axis]:
                raise ValueError(
                    "%s: a sample of length %d on axis %d is longer than the bound upto(%d)"
                    % (where, value.shape[axis - 1], axis, self.bounds[axis])
                )
        dst[tuple(slice(0, s) for s in value.shape)] = value
        return [value.shape[a - 1] for a in self.axes] if self.k > 1 else value.shape[self.axes[0] - 1]

    def compact(self, views, n, queue_name):
        """Packs rows written at the bound (``staged_view``) into the element; returns the engine rows.

        The lengths are what the writer put in the lengths view; the data is
        moved to its packed place within the same staging, then padded.
        """
        lengths = self.check_lengths(np.array(views[1][:n]), n, [self.bounds[a] for a in self.axes], queue_name)
        extents = self.extents(lengths)
        staged = self.staged_view(views[0])
        packed = self.packed_view(views[0], n, extents)
        if packed.shape[1:] == staged.shape[1:]:
            self.pad(packed, lengths)  # at the bound already: in place
        else:
            self.copy_rows(packed, staged, lengths)  # numpy copies through a temporary where two overlap
        return self.engine_rows(n, extents)

    def unpack(self, arrays):
        """The padded array and the lengths from this component's engine arrays."""
        data, lengths = arrays[0], arrays[1]
        n = len(lengths)
        extents = [len(e) for e in arrays[2:]]
        return data.reshape(self.packed_shape(n, extents)), lengths

    # ---- graph side ----------------------------------------------------------------------

    def graph_output(self, variables, graph):
        """The padded variable (n, L..., inner) from the engine's outputs, by shapes the host knows.

        ``graph`` is the queue's graph front end (theano_queue.graph.base): its tensor functions build it.
        """
        tensor = graph.tensor
        data, lengths = variables[0], variables[1]
        shape = list(self.packed_shape(lengths.shape[0], [e.shape[0] for e in variables[2:]]))
        return tensor.reshape(data, shape, ndim=len(shape)), lengths

    def graph_inputs(self, value, lengths, queue_name, graph):
        """The engine's inputs for a padded variable and its lengths (None: every row full)."""
        tensor, Assert = graph.tensor, graph.Assert
        where = self.where(queue_name)
        value = schema.graph_value(self.component, value, queue_name, tensor)
        n = value.shape[0]
        extents = [value.shape[a] for a in self.axes]
        checks = [tensor.le(e, self.bounds[a]) for e, a in zip(extents, self.axes)]
        message = (
            "%s: in the enqueued element, rows must fit the bound %s and lengths be one per row, "
            "between 0 and the data's extent" % (where, tuple(self.component.shape))
        )
        if lengths is None:
            value = Assert(message)(value, *checks)
            lengths = tensor.stack(extents) if self.k > 1 else extents[0]
            lengths = tensor.alloc(tensor.cast(lengths, "int64"), *((n,) if self.k == 1 else (n, self.k)))
        else:
            lengths = tensor.as_tensor_variable(lengths)
            want = 1 if self.k == 1 else 2
            if lengths.ndim != want or lengths.dtype not in (
                "int8",
                "int16",
                "int32",
                "int64",
                "uint8",
                "uint16",
                "uint32",
            ):
                raise TypeError(
                    "%s: lengths must be a %d-d integer variable, got %d-d %s"
                    % (where, want, lengths.ndim, lengths.dtype)
                )
            lengths = tensor.cast(lengths, "int64")
            per_axis = lengths.reshape((lengths.shape[0], self.k))
            checks.append(tensor.eq(lengths.shape[0], n))
            checks.append(tensor.all(tensor.ge(lengths, 0)))
            checks += [tensor.all(tensor.le(per_axis[:, j], e)) for j, e in enumerate(extents)]
            # Checked before the padding reads them: the mask needs one length per row.
            lengths = Assert(message)(lengths, *checks)
            per_axis = lengths.reshape((lengths.shape[0], self.k))
            value = tensor.switch(
                self.graph_mask(per_axis, extents, value.ndim, tensor), value, np.asarray(self.pad_value, self.dtype)
            )
        flat = value.reshape(
            [tensor.prod(value.shape[: len(self.middle) + 1])] + list(self.inner), ndim=1 + len(self.inner)
        )
        companions = [tensor.zeros((e, 0), dtype=EXTENT_DTYPE) for e in extents]
        return [flat, lengths] + companions

    def graph_mask(self, per_axis, extents, ndim, tensor):
        """True where a position lies within its row's lengths, broadcastable against the padded variable."""
        mask = None
        for j, (axis, extent) in enumerate(zip(self.axes, extents)):
            within = tensor.lt(tensor.arange(extent).dimshuffle("x", 0), per_axis[:, j].dimshuffle(0, "x"))
            pattern = [0] + ["x" if a != axis else 1 for a in range(1, ndim)]
            within = within.dimshuffle(*pattern)
            mask = within if mask is None else tensor.and_(mask, within)
        return mask


# The old name, kept for code that imports it; renamed as it read like Theano's (and PyTensor's) graph Variable.
Variable = VarlenComponent


def rows_contiguous(array):
    """True when each row (``array[i]``) is C-contiguous, whatever the stride between rows."""
    return len(array) == 0 or array[0].flags.c_contiguous
