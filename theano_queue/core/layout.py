"""Variable-length components laid out as the engine's fixed components, and back.

The engine knows only fixed shapes and a row count per component per element.
A user component with variable (:class:`~theano_queue.core.spec.upto`) axes, e.g.
``("tokens", "int32", (64, upto(512), 8))``, becomes three kinds of engine
component:

* ``tokens``, the data, packed: shape ``(64 * 512, 8)``.  An element of ``n``
  rows padded to its own extent ``L`` fills ``n * L`` of those rows, so only
  the used bytes cross the bus;
* ``tokens.lengths``, int64 ``(64,)`` (``(64, k)`` for ``k`` variable axes):
  each row's length on every variable axis;
* ``tokens.extent1`` for each variable axis (here axis 1), uint8 ``(512, 0)``:
  zero bytes, whose *row count* is the element's extent ``L`` on that axis.
  The engine keeps row counts on the host, so every Op, the GPU ones too,
  knows ``L`` without reading device memory: the graph reshapes the data
  with host-known shapes.

The leading-axis bound of the variable component bounds the rows as for any
component.  The packed data of ``n`` rows lies at the start of the data
component, C-ordered as ``(n, L1, ..., Lk, inner...)``; the padding, up to
each row's length, holds the component's ``pad_value``.

:class:`Layout` maps a queue's components to the engine's and back: packing
an element straight into a slot's staging (``put``), rows written at the
bound and compacted before the commit (``writer()`` and the Feeder's
samples), unpacking a taken element (``get``) and the graph's reshape
(``dequeue``, ``enqueue``).
"""

from collections.abc import Mapping

from . import schema
from .varlen import Padded, VarlenComponent, rows_contiguous  # noqa: F401  (Padded: imported from here too)


class Layout:
    """A queue's components (the user's view) and the engine's, with the mapping between them."""

    def __init__(self, components):
        self.components = tuple(components)
        self.variables = {}  # user index -> VarlenComponent
        engine, self.spans = [], []
        for i, component in enumerate(self.components):
            start = len(engine)
            if component.variable_axes:
                variable = self.variables[i] = VarlenComponent(component)
                engine.extend(variable.engine)
            else:
                engine.append(component)
            self.spans.append((start, len(engine)))
        self.engine = tuple(engine)
        self.varying = bool(self.variables)
        #: Per engine component, the name its rows go by where they are the batch's, else None (the engine's
        #: Ring.batch): a variable component's rows are its lengths', its packed data and extents are not.
        batch = []
        for i, component in enumerate(self.components):
            name = component.name if component.batched else None
            batch.extend([None, name] + [None] * self.variables[i].k if i in self.variables else [name])
        self.engine_batch = tuple(batch)

    def variable_names(self):
        return [self.components[i].name for i in self.variables]

    def refuse_lengths(self, queue_name, what):
        if not self.varying:
            raise ValueError(
                "Queue %r: %s(lengths=True) needs a component with a variable (tq.upto) axis; this "
                "queue has none" % (queue_name, what)
            )

    # ---- host side -----------------------------------------------------------------------

    def with_lengths(self, values, lengths, queue_name):
        """``values`` (in component order) with the padded ones given ``lengths`` (a mapping) as :class:`Padded`."""
        if lengths is None:
            return values
        if not isinstance(lengths, Mapping):
            raise TypeError(
                "Queue %r: lengths must map component names to lengths, e.g. {'tokens': lens}, got %r"
                % (queue_name, type(lengths).__name__)
            )
        names = {c.name: i for i, c in enumerate(self.components)}
        values = list(values)
        for name, given in lengths.items():
            i = names.get(name)
            if i is None or i not in self.variables:
                raise ValueError(
                    "Queue %r: lengths given for %r, which is no component with a variable axis (%s)"
                    % (queue_name, name, ", ".join(map(repr, self.variable_names())))
                )
            if isinstance(values[i], Padded) or isinstance(values[i], (list, tuple)):
                raise ValueError(
                    "Queue %r, component %r: give lengths= with a padded array only (a list of rows "
                    "or a Padded value carries its own)" % (queue_name, name)
                )
            values[i] = Padded(values[i], given)
        return values

    def prepare(self, values, queue_name):
        """Checks an element (in component order); returns ``write(views) -> rows`` for the engine's slot.

        Every check runs here, before a slot is taken: bad input costs the
        queue nothing.
        """
        writers, rows = [], []
        for i, (component, value) in enumerate(zip(self.components, values)):
            if i in self.variables:
                n, writer = self.variables[i].prepare(value, queue_name)
            else:
                n, writer = fixed_writer(component, value, queue_name)
            writers.append(writer)
            if component.batched:
                rows.append((component.name, n))
        schema.check_rows(queue_name, rows)

        def write(views):
            rows = []
            for (start, end), writer in zip(self.spans, writers):
                rows.extend(writer(views[start:end]))
            return rows

        return write

    def staged(self, views, reset_lengths=True):
        """The slot at the bound, as a writer sees it: (one view per user component, lengths views by name).

        A variable component's view is its staging shaped at its bounds; with
        ``reset_lengths`` its lengths view starts at each row's bound (a full
        row).  Without, the writer sets the lengths of the rows it writes
        (worker processes share a slot's rows).
        """
        arrays, lengths = [], {}
        for i, (start, end) in enumerate(self.spans):
            if i in self.variables:
                variable = self.variables[i]
                arrays.append(variable.staged_view(views[start]))
                lengths_view = views[start + 1]
                if reset_lengths:
                    lengths_view.reshape(variable.batch, variable.k)[...] = [variable.bounds[a] for a in variable.axes]
                lengths[variable.name] = lengths_view
            else:
                arrays.append(views[start])
        return arrays, lengths

    def finish(self, views, rows, queue_name):
        """Engine rows for a slot written at the bound with ``rows`` user rows per component (compacting it)."""
        engine_rows = []
        for i, (start, end) in enumerate(self.spans):
            if i in self.variables:
                engine_rows.extend(self.variables[i].compact(views[start:end], rows[i], queue_name))
            else:
                engine_rows.append(rows[i])
        return engine_rows

    def _users_components(self, parts, join, lengths):
        """The user's components from the engine's ``parts`` (a variable component's through
        ``join(variable, its parts) -> (data, lengths)``), then the lengths with ``lengths``."""
        if not self.varying:
            return list(parts)
        out, extra = [], []
        for i, (start, end) in enumerate(self.spans):
            if i in self.variables:
                data, lens = join(self.variables[i], parts[start:end])
                out.append(data)
                extra.append(lens)
            else:
                out.append(parts[start])
        return out + extra if lengths else out

    def unpack(self, arrays, lengths=False):
        """A taken element (engine arrays) as the user's arrays, then the lengths with ``lengths``."""
        return tuple(self._users_components(arrays, VarlenComponent.unpack, lengths))

    # ---- graph side ------------------------------------------------------------------------

    def graph_outputs(self, variables, lengths, graph):
        """The user's variables from the engine's outputs of one Dequeue node (``graph``: the front end)."""
        return self._users_components(variables, lambda variable, parts: variable.graph_output(parts, graph), lengths)

    def graph_inputs(self, values, lengths, queue_name, graph):
        """The engine's inputs of an Enqueue node for the user's values (and lengths by name)."""
        if lengths is not None and not isinstance(lengths, Mapping):
            raise TypeError(
                "Queue %r: lengths must map component names to variables, got %r" % (queue_name, type(lengths).__name__)
            )
        lengths = dict(lengths or {})
        unknown = sorted(set(lengths) - set(self.variable_names()))
        if unknown:
            raise ValueError(
                "Queue %r: lengths given for %s, which %s no component with a variable axis"
                % (queue_name, ", ".join(map(repr, unknown)), "is" if len(unknown) == 1 else "are")
            )
        inputs = []
        for i, (component, value) in enumerate(zip(self.components, values)):
            if i in self.variables:
                inputs.extend(self.variables[i].graph_inputs(value, lengths.get(component.name), queue_name, graph))
            else:
                inputs.append(schema.graph_value(component, value, queue_name, graph.tensor))
        return inputs


def shape_bound(shape):
    """A component's shape as the engine's messages write it, e.g. ``(<=4, 3)``: the batch axis is a bound."""
    if not shape:
        return "()"
    dims = ["<=%d" % shape[0]] + [str(d) for d in shape[1:]]
    return "(%s)" % (dims[0] + "," if len(dims) == 1 else ", ".join(dims))


def fixed_writer(component, value, queue_name):
    """A fixed component's value checked as put checks it; returns its rows and ``write(views) -> [rows]``."""
    value = schema.component_value(component, value, queue_name)
    shape, want = value.shape, component.shape
    if len(shape) != len(want) or (want and (shape[0] > want[0] or shape[1:] != want[1:])):
        raise schema.shape_error(queue_name, component, shape, shape_bound(want))

    def write(views):
        view = views[0]
        if value.ndim:
            view[: len(value)] = value
            return [len(value)]
        view[...] = value
        return [1]

    return (len(value) if value.ndim else 1), write
