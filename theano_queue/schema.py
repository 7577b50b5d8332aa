"""The one rule by which a value becomes a component's slot bytes, and the per-queue schema that applies it.

Every entry asks here: ``Queue.put`` (the engine calls :meth:`Schema.cast`
for any value that is not already an array of the component's exact
dtype), the Feeder's thread, workers, map-style, array and held datasets
(:mod:`.feed.check`, :mod:`.feed.sources`), variable-length rows
(:mod:`.variable`), device puts, graph enqueues (:func:`graph_value`) and pad values.  The engine keeps only its
fast path for values of the exact dtype, and casts an array dataset's rows
only where this rule said it may (``Ring.put_rows(casts=)``).

The rule:

* an array of the component's dtype is taken as it is;
* an array of another dtype is taken when numpy casts it safely
  (``np.can_cast(..., "safe")``: uint8 into int32, float16 into float32),
  and refused otherwise (int64 into int32, float64 into float32);
* a device array must have the component's own dtype (:func:`device_dtype`:
  device memory is copied as it is);
* Python numbers and lists are taken when the cast keeps their values, as
  numpy's value-based rule has it: integers within the dtype's range,
  floats into a floating dtype without overflow, never a float into an
  integer; ``[]`` is an empty row of the component's dtype.

Each refusal has one wording, whichever entry it came through.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def where(queue_name: str, component) -> str:
    """Who refuses a value: the queue and the component, never the entry (q.put, a Feeder, a graph's Enqueue,
    a device put), so that one bad value is worded alike whichever way it came."""
    return "Queue %r, component %r" % (queue_name, component.name)


def unsafe_dtype(queue_name: str, component, dtype) -> TypeError:
    """An array whose dtype does not cast safely, with both fixes (tests/cpu/test_messages.py)."""
    want = np.dtype(component.dtype)
    return TypeError(
        "%s: expected dtype %s, got %s, which does not cast safely to it: pass .astype('%s'), or declare the "
        "component %s" % (where(queue_name, component), want, dtype, want, np.dtype(dtype))
    )


def shape_error(queue_name: str, component, shape, bound: str) -> ValueError:
    """A batch of the wrong shape (``bound``: the component's, e.g. ``(<=4, 3)``), worded as the engine's put
    words it (c_code/python/tq_py_element.c, check_dims): whichever producer gave it, the batch is put."""
    at = where(queue_name, component)
    if len(shape) != len(component.shape):
        return ValueError(
            "%s: expected %d dimensions, shape %s; got %d, shape %s"
            % (at, len(component.shape), bound, len(shape), tuple(shape))
        )
    return ValueError("%s: expected shape %s, got %s" % (at, bound, tuple(shape)))


def component_value(component, value: Any, queue_name: str) -> np.ndarray:
    """``value`` as an array the component takes (its own dtype kept where it casts safely); TypeError otherwise.

    The one place the rule lives (see the module's text).  An array is not
    copied: the copy into the slot casts it.
    """
    want = np.dtype(component.dtype)
    if isinstance(value, np.ndarray):
        if value.dtype != want and not np.can_cast(value.dtype, want, "safe"):
            raise unsafe_dtype(queue_name, component, value.dtype)
        return value
    if isinstance(value, np.generic):
        return component_value(component, np.asarray(value), queue_name)
    return python_value(component, value, queue_name, want)


def cast(component, value: Any, queue_name: str) -> np.ndarray:
    """``value`` as an array of the component's exact dtype, by the rule (a copy only where the dtype differs):
    what a path that holds the value as the component's own bytes (a held dataset, a pad value) asks for."""
    return component_value(component, value, queue_name).astype(component.dtype, copy=False)


def python_value(component, value: Any, queue_name: str, want: np.dtype) -> np.ndarray:
    """A Python number or (nested) list as an array of the component's dtype, by the value-based rule."""
    if holds_no_numbers(value):
        return np.asarray(value, want)  # [] is a row of length 0, whatever numpy's default dtype
    try:
        given = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise TypeError(
            "%s: cannot read %s as an array: %s" % (where(queue_name, component), type(value).__name__, exc)
        ) from None
    if given.dtype.kind not in "biufc":
        raise TypeError(
            "%s: expected numbers of dtype %s, got %s values" % (where(queue_name, component), want, given.dtype)
        )
    if np.can_cast(given.dtype, want, "safe"):
        return given.astype(want)
    with np.errstate(all="ignore"):
        cast = given.astype(want)
        if given.dtype.kind == "f" and want.kind == "f":
            kept = np.array_equal(np.isfinite(cast), np.isfinite(given))
        elif want.kind in "biu" and given.dtype.kind not in "biu":
            kept = False  # as numpy's own value-based rule: no float becomes an integer
        else:
            kept = given.dtype.kind != "c" and np.array_equal(cast.astype(given.dtype), given)
    if not kept:
        raise TypeError(
            "%s: expected values that fit dtype %s; these %s values do not (a cast would change them)"
            % (where(queue_name, component), want, given.dtype)
        )
    return cast


def holds_no_numbers(value) -> bool:
    """True for [], [[]], ...: a row of length 0 written as a Python list (numpy would call it float64)."""
    return isinstance(value, (list, tuple)) and all(holds_no_numbers(v) for v in value)


def device_dtype(component, dtype, queue_name: str) -> None:
    """A device array's dtype, which must be the component's own: device memory is copied as it is (a cast
    would need the GPU); TypeError otherwise."""
    if dtype != component.dtype:
        raise TypeError(
            "%s: expected dtype %s, got a device array of %s (device arrays are not converted: cast it on the GPU)"
            % (where(queue_name, component), np.dtype(component.dtype), dtype)
        )


def graph_value(component, variable, queue_name: str, tensor):
    """An Enqueue node's input for the component, by the rule: TypeError where it does not fit.

    A graph variable has a dtype, not values, so the array rule applies: its
    own dtype is taken, one that casts safely is cast in the graph
    (``tensor.cast``, ``tensor`` the graph library's module) so that the
    engine is handed the exact dtype, any other is refused as an array of it
    would be.  The values a compiled function is called with are the graph
    library's to convert to its input variables' dtypes, before any of this.
    """
    variable = tensor.as_tensor_variable(variable)
    want = np.dtype(component.dtype)
    if variable.ndim != len(component.shape):
        raise TypeError(
            "%s: expected a %d-d %s variable, got %d-d %s (%s)"
            % (where(queue_name, component), len(component.shape), want, variable.ndim, variable.dtype, variable)
        )
    if np.dtype(variable.dtype) == want:
        return variable
    if not np.can_cast(variable.dtype, want, "safe"):
        raise unsafe_dtype(queue_name, component, np.dtype(variable.dtype))
    return tensor.cast(variable, want.name)


class Schema:
    """A queue's schema: its components (the engine's, in slot order) and the rule applied to each.

    Made once per queue (:class:`~theano_queue.port.Port`); the engine's put
    calls :meth:`cast` for every value that is not an array of the exact
    dtype, so that ``Queue.put`` follows the rule every other entry follows.
    """

    def __init__(self, queue_name: str, components: Sequence):
        self.queue_name = queue_name
        self.components = list(components)
        self.dtypes = [np.dtype(c.dtype) for c in self.components]

    def value(self, index: int, value: Any) -> np.ndarray:
        """Component ``index``'s value checked by the rule (its dtype kept where it casts safely)."""
        return component_value(self.components[index], value, self.queue_name)

    def cast(self, index: int, value: Any) -> np.ndarray:
        """Component ``index``'s value as an array of its exact dtype (the engine copies those bytes)."""
        return cast(self.components[index], value, self.queue_name)
