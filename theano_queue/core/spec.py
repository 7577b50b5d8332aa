"""What a queue holds: its components, and turning user elements into them."""

import math
from collections.abc import Mapping
from typing import ClassVar, NamedTuple, Tuple

import numpy as np

from . import schema

# The dtypes a Theano TensorType takes (theano.tensor.type), in native byte order.
THEANO_DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 complex64 complex128".split()
)
# numpy's own limit on dimensions (NPY_MAXDIMS).
MAX_DIMS = 32
# No host or device memory holds more than this; larger sizes are arithmetic
# overflow, not a ring.
MAX_COMPONENT_BYTES = 1 << 50


class AxisBound(int):
    """An axis's bound that says what kind of axis it is (:class:`upto`, :class:`own`): an int from ``least`` up,
    written as its class's call."""

    least: ClassVar[int]

    def __new__(cls, bound):
        if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or bound < cls.least:
            raise ValueError("%s: expected a bound that is an int >= %d, got %r" % (cls.__name__, cls.least, bound))
        return super().__new__(cls, int(bound))

    def __repr__(self):
        return "%s(%d)" % (type(self).__name__, int(self))

    __str__ = __repr__

    def __reduce__(self):
        return type(self), (int(self),)


class upto(AxisBound):
    """An axis of variable extent, at most ``bound``: ``("tokens", "int32", (64, tq.upto(512)))``.

    Every element carries its own extent on the axis (the longest of its
    rows) and each row its own length; the slot is sized for the bound.  It
    is the bound wherever an int is expected (``math.prod(shape)``).
    """

    least = 0


class own(AxisBound):
    """A leading axis that is the component's own, not the batch: ``("classes", "int32", (tq.own(10),))``.

    An element's components agree on their leading (batch) axis: ``q.put(x,
    y)`` refuses an ``x`` of 4 rows with a ``y`` of 3.  A component whose
    leading axis means something else (a per-batch table, a list of classes)
    declares it so, and may hold any number of rows up to ``bound`` whatever
    the batch holds.  A scalar component (shape ``()``) has no batch axis
    already.  It is the bound wherever an int is expected.
    """

    least = 1


class Component(NamedTuple):
    """One named array of every element: ``(name, dtype, shape)``, and its ``pad_value``.

    ``shape[0]`` bounds the leading axis: an element may carry fewer rows (a
    partial last batch) but never more.  The other axes are fixed, but for
    those marked :class:`upto` (variable, see :attr:`variable_axes`), whose
    padding is ``pad_value``.
    """

    name: str
    dtype: np.dtype
    shape: Tuple[int, ...]
    pad_value: object = 0
    broadcast_axes: Tuple[int, ...] = ()

    @property
    def nbytes(self):
        """Bytes of a full element of this component (variable axes at their bound)."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def batched(self):
        """True when the leading axis is the batch's (its rows agree with the other batched components'); False
        for a scalar component and one declared with an axis of its own (:class:`own`)."""
        return bool(self.shape) and not isinstance(self.shape[0], own)

    @property
    def variable_axes(self):
        """The axes marked :class:`upto`, in order; () for a fixed component."""
        return tuple(i for i, n in enumerate(self.shape) if isinstance(n, upto))

    @property
    def broadcastable(self):
        """Theano's broadcast pattern: no axis broadcasts but those declared (``Queue(broadcastable=...)``).

        The convention of ``T.tensor4``, ``T.matrix`` and ``theano.shared``:
        a dequeued variable can be swapped for any of them (``givens``).
        """
        return tuple(i in self.broadcast_axes for i in range(len(self.shape)))


def check_queue_name(name):
    """The queue's name, or a TypeError that names the argument."""
    if not isinstance(name, str):
        raise TypeError("Queue: name must be a str, got %r" % (name,))
    return name


# Names numpy reads as its widest type, where Theano's own default (floatX) and most models mean 32 bits.
AMBIGUOUS_DTYPES = {"float": "float32 or float64", "int": "int32 or int64", "complex": "complex64 or complex128"}


def parse_dtype(dtype, where):
    """A numpy dtype that Theano can hold, or a TypeError saying what came."""
    if dtype is None:
        # np.dtype(None) is float64: a silent default nobody asked for.
        raise TypeError("%s: dtype=None; give the dtype, e.g. 'float32'" % where)
    name = dtype.__name__ if dtype in (float, int, complex) else dtype
    if isinstance(name, str) and name in AMBIGUOUS_DTYPES:
        raise TypeError(
            "%s: dtype %r is ambiguous (numpy reads it as %s); say which: %s"
            % (where, dtype, np.dtype(name), AMBIGUOUS_DTYPES[name])
        )
    try:
        parsed = np.dtype(dtype)
    except TypeError:
        raise TypeError("%s: %r is not a dtype" % (where, dtype)) from None
    if parsed.name not in THEANO_DTYPES or not parsed.isnative:
        order = " in the machine's byte order" if parsed.name in THEANO_DTYPES else ""
        raise TypeError(
            "%s: expected one of Theano's dtypes%s (%s), got %s"
            % (where, order, ", ".join(sorted(THEANO_DTYPES)), parsed.str if order else parsed)
        )
    return parsed


def parse_shape(shape, where):
    """The shape as a tuple of ints, or an error naming the argument."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError("%s: shape must be a tuple of ints, e.g. (128, 64), got %r" % (where, shape))
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in shape) or (
        shape and shape[0] < 1
    ):
        raise ValueError(
            "%s: expected a shape of non-negative ints with a leading axis >= 1, got %r" % (where, tuple(shape))
        )
    if len(shape) > MAX_DIMS:
        raise ValueError("%s: expected at most %d dimensions, got %d" % (where, MAX_DIMS, len(shape)))
    if shape and isinstance(shape[0], upto):
        raise ValueError(
            "%s: the leading (batch) axis is always variable up to its size; mark only later axes "
            "with upto, got %r" % (where, tuple(shape))
        )
    if any(isinstance(n, own) for n in shape[1:]):
        raise ValueError(
            "%s: tq.own marks a leading axis that is not the batch's; the other axes are the component's own "
            "already, got %r" % (where, tuple(shape))
        )
    return tuple(n if isinstance(n, (upto, own)) else int(n) for n in shape)


def parse_components(components, queue_name, pad_value=None, broadcastable=None):
    """A tuple of :class:`Component` from ``[(name, dtype, shape), ...]``, or a clear error.

    ``pad_value`` maps the names of components with variable axes to their
    padding (0 for those it leaves out); ``broadcastable`` maps names to the
    axes that broadcast (see :func:`with_broadcast_axes`).
    """
    where = "Queue %r" % queue_name
    if isinstance(components, (str, bytes)) or not hasattr(components, "__iter__"):
        raise TypeError("%s: components must be a list of (name, dtype, shape), got %r" % (where, components))
    parsed, seen = [], set()
    for item in components:
        try:
            name, dtype, shape = item
        except (TypeError, ValueError):
            raise TypeError("%s: each component is (name, dtype, shape), got %r" % (where, item)) from None
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError("%s: a component's name must be an identifier, got %r" % (where, name))
        if name in seen:
            raise ValueError("%s: component %r is declared twice" % (where, name))
        seen.add(name)
        here = "%s, component %r" % (where, name)
        component = Component(name, parse_dtype(dtype, here), parse_shape(shape, here))
        if component.nbytes > MAX_COMPONENT_BYTES:
            raise ValueError(
                "%s: shape %r of %s is %d bytes per element; no memory holds that"
                % (here, component.shape, component.dtype, component.nbytes)
            )
        parsed.append(component)
    if not parsed:
        raise ValueError("%s: expected at least one component" % where)
    return tuple(with_broadcast_axes(with_pad_values(parsed, pad_value, queue_name), broadcastable, queue_name))


def with_broadcast_axes(components, broadcastable, queue_name):
    """The components, each with the axes ``broadcastable`` declares for it, checked.

    ``broadcastable`` maps component names to axes, e.g. ``{"x": (1,)}`` for
    ``("x", "float32", (50, 1, 28, 28))``: only fixed axes of length 1 after
    the leading (batch) axis can broadcast.
    """
    where = "Queue %r" % queue_name
    if broadcastable is None:
        return components
    if not isinstance(broadcastable, Mapping):
        raise TypeError(
            "%s: broadcastable must map component names to axes, e.g. {'x': (1,)}, got %r" % (where, broadcastable)
        )
    by_name = components_by_name(components, broadcastable, "broadcastable", where)
    for name, axes in broadcastable.items():
        component = by_name[name]
        here = "%s, component %r" % (where, name)
        if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
            axes = (axes,)
        if not isinstance(axes, (tuple, list)) or not all(
            isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes
        ):
            raise TypeError("%s: broadcastable axes must be a tuple of ints, got %r" % (here, axes))
        for axis in axes:
            if not (0 < axis < len(component.shape)) or component.shape[axis] != 1 or axis in component.variable_axes:
                raise ValueError(
                    "%s: only a fixed axis of length 1 after the leading one can broadcast; axis %r of "
                    "shape %r cannot" % (here, axis, component.shape)
                )
        by_name[name] = component._replace(broadcast_axes=tuple(sorted(set(int(a) for a in axes))))
    return [by_name[c.name] for c in components]


def components_by_name(components, names, option, where):
    """{name: component}, once every name an ``option`` (a mapping by component name) gives is a component's."""
    by_name = {c.name: c for c in components}
    for name in names:
        if name not in by_name:
            raise ValueError(
                "%s: %s names %r, which is no component (the components are %s)"
                % (where, option, name, ", ".join(by_name))
            )
    return by_name


def with_pad_values(components, pad_value, queue_name):
    """The components, each variable one with its pad value, checked.

    ``pad_value`` maps component names to values, or is one number for every
    variable component (as TensorFlow's ``padded_batch`` takes).
    """
    where = "Queue %r" % queue_name
    if pad_value is None:
        return components
    if not isinstance(pad_value, Mapping):
        if isinstance(pad_value, (str, bytes)) or np.ndim(pad_value) != 0:
            raise TypeError(
                "%s: pad_value must be one number, or map component names to numbers, e.g. "
                "{'tokens': -1}, got %r" % (where, pad_value)
            )
        variable = [c.name for c in components if c.variable_axes]
        if not variable:
            raise ValueError("%s: pad_value is for components with a variable (upto) axis; this queue has none" % where)
        pad_value = dict.fromkeys(variable, pad_value)
    by_name = components_by_name(components, pad_value, "pad_value", where)
    for name, value in pad_value.items():
        component = by_name[name]
        if not component.variable_axes:
            raise ValueError(
                "%s, component %r: pad_value is for components with a variable (upto) axis; this "
                "one's shape %r has none" % (where, name, component.shape)
            )
        try:
            cast = schema.cast(component, value, queue_name)
        except TypeError as exc:
            raise TypeError("pad_value %r: %s" % (value, exc)) from None
        if cast.shape != ():
            raise ValueError("%s, component %r: pad_value must be one number, got %r" % (where, name, value))
        by_name[name] = component._replace(pad_value=cast[()])
    return [by_name[c.name] for c in components]


def element_arrays(components, element, queue_name):
    """The element as a list of arrays in component order (see :func:`element_in_order`)."""
    values = element_in_order(components, element, queue_name)
    return [schema.component_value(c, value, queue_name) for c, value in zip(components, values)]


def element_in_order(components, element, queue_name):
    """The element as a list in component order.

    Accepts a mapping keyed by component name, a tuple or list with one entry
    per component, or, for a queue of one component, the bare array (or a
    1-tuple of it).  A tuple always lists components: ``q.put(a, b)`` on a
    queue of one component is an error, not a two-row batch.
    """
    if type(element) is tuple and len(element) == len(components):
        return list(element)  # the common case (what put's arguments are), spared the checks below
    names = [c.name for c in components]
    if isinstance(element, Mapping):
        missing = [n for n in names if n not in element]
        unknown = sorted(set(element) - set(names), key=str)
        if missing or unknown:
            problems = []
            if missing:
                problems.append("missing %s" % ", ".join(map(repr, missing)))
            if unknown:
                problems.append("unknown %s" % ", ".join(map(repr, unknown)))
            raise ValueError(
                "Queue %r: an element keyed by name needs exactly the components %s; %s"
                % (queue_name, ", ".join(names), "; ".join(problems))
            )
        element = [element[n] for n in names]
    elif len(components) == 1 and not isinstance(element, tuple):
        element = [element]
    elif not isinstance(element, (tuple, list)):
        if hasattr(element, "type") and hasattr(element, "ndim"):  # a graph variable: its shape is the run's
            what = "%d-d variable" % element.ndim
        elif hasattr(element, "shape"):
            what = "array of shape %s" % (np.shape(element),)
        elif isinstance(getattr(element, "__cuda_array_interface__", None), Mapping):  # a device array: its shape
            what = "array of shape %s" % (tuple(element.__cuda_array_interface__.get("shape", ())),)
        else:
            what = type(element).__name__
        raise ValueError(
            "Queue %r: expected %d components (%s), got a bare %s: give one value per component, as a tuple "
            "or a dict keyed by name" % (queue_name, len(components), ", ".join(names), what)
        )
    elif len(element) != len(components):
        raise ValueError(
            "Queue %r: expected %d component%s (%s), got %d"
            % (queue_name, len(components), "" if len(components) == 1 else "s", ", ".join(names), len(element))
        )
    return list(element)
