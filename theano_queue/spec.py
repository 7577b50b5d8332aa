"""What a queue holds: its components, and turning user elements into them."""
from collections.abc import Mapping
from typing import NamedTuple, Tuple

import numpy as np


class Component(NamedTuple):
    """One named array of every element: ``(name, dtype, shape)``.

    ``shape[0]`` bounds the leading axis: an element may carry fewer rows (a
    partial last batch) but never more.  The other axes are fixed.
    """

    name: str
    dtype: np.dtype
    shape: Tuple[int, ...]

    @property
    def nbytes(self):
        """Bytes of a full element of this component."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def broadcastable(self):
        """Theano's broadcast pattern: fixed axes of length 1 broadcast; the leading axis never does."""
        return tuple(i > 0 and n == 1 for i, n in enumerate(self.shape))


def parse_components(components, queue_name):
    """A tuple of :class:`Component` from ``[(name, dtype, shape), ...]``, or a clear error."""
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
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError("%s, component %r: %r is not a dtype" % (where, name, dtype)) from None
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
            raise TypeError("%s, component %r: expected a plain numeric dtype, got %s" % (where, name, dtype))
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if not all(isinstance(n, (int, np.integer)) and n >= 0 for n in shape) or (shape and shape[0] < 1):
            raise ValueError(
                "%s, component %r: expected a shape of non-negative ints with a leading axis >= 1, got %r"
                % (where, name, shape)
            )
        parsed.append(Component(name, dtype, tuple(int(n) for n in shape)))
    if not parsed:
        raise ValueError("%s: expected at least one component" % where)
    return tuple(parsed)


def element_arrays(components, element, queue_name):
    """The element as a sequence in component order.

    Accepts a mapping keyed by component name, a tuple or list with one entry
    per component, or, for a queue of one component, the bare array (or a
    1-tuple of it).
    """
    if isinstance(element, Mapping):
        names = [c.name for c in components]
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
        return [element[n] for n in names]
    if len(components) == 1:
        return list(element) if isinstance(element, tuple) and len(element) == 1 else [element]
    return element
