"""The one rule by which a value becomes a component's slot bytes, and the per-queue schema that applies it.

Every entry follows it: ``Queue.put`` (the engine's put applies the array
rule itself, for any array not already of the component's exact dtype), the
Feeder's thread, workers, map-style, array and held datasets
(:mod:`.feed.check`, :mod:`.feed.sources`), variable-length rows
(:mod:`.variable`), device puts, graph enqueues (:func:`graph_value`) and pad
values.  The rule's table lives in the engine (``c_code/engine/core/tq_scalar.h``:
which dtype casts safely into which, whether an integer keeps its value);
this module asks it (``_engine.casts_safely``, ``_engine.values_fit``) and
holds the one wording of every refusal (:data:`WORDING`), which the engine's
own refusals read too.

The rule:

* an array of the component's dtype is taken as it is;
* an array of another dtype is taken when every value of its dtype is one of
  the component's (numpy's safe casting: uint8 into int32, float16 into
  float32), and refused otherwise (int64 into int32, float64 into float32;
  floats holding NaN into an integer are refused as such);
* a device array must have the component's own dtype (:func:`device_dtype`:
  device memory is copied as it is);
* Python numbers and lists are taken when each value keeps its value:
  integers exactly within the dtype (whatever their width or sign: 2**63 is
  no int64, -1 no uint64), floats into a floating dtype without overflow,
  never a float into an integer; ``[]`` is an empty row of the component's
  dtype;
* an element's components agree on their leading (batch) axis, but for a
  component whose leading axis is its own (:class:`~theano_queue.own`) and
  a scalar one (:func:`check_rows`).

Each refusal has one wording, whichever entry it came through.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .. import _engine

#: The one wording of each refusal (``%`` templates).  The engine's put formats the same templates
#: (c_code/python/tq_py_schema.c), so that a value is refused alike by every entry.
WORDING = {
    "where": "Queue %r, component %r",
    "unsafe": "%s: expected dtype %s, got %s, which does not cast safely to it: pass .astype('%s'), or declare the "
    "component %s",
    "nan": "%s: expected dtype %s, got %s values with NaN, and NaN cannot be an integer: fill or drop the missing "
    "values first, or declare the component %s",
    "fit": "%s: expected values that fit dtype %s; these %s values do not (a cast would change them)",
    "rows": "%sQueue %r: component %r has %d rows and component %r %d; the components of an element share their "
    "leading (batch) axis (declare a leading axis of a component's own as tq.own(n))",
}


def where(queue_name: str, component) -> str:
    """Who refuses a value: the queue and the component, never the entry (q.put, a Feeder, a graph's Enqueue,
    a device put), so that one bad value is worded alike whichever way it came."""
    return WORDING["where"] % (queue_name, component.name)


def unsafe_dtype(queue_name: str, component, dtype) -> TypeError:
    """An array whose dtype does not cast safely, with both fixes (tests/cpu/test_messages.py)."""
    want = np.dtype(component.dtype)
    return TypeError(WORDING["unsafe"] % (where(queue_name, component), want, dtype, want, np.dtype(dtype)))


def rows_error(queue_name: str, first: tuple, other: tuple, op: Optional[str] = None) -> ValueError:
    """Two components whose rows differ, each ``(name, rows)``; ``op``: the Op that put the element."""
    return ValueError(WORDING["rows"] % ("%s: " % op if op else "", queue_name, first[0], first[1], other[0], other[1]))


def check_rows(queue_name: str, rows: Sequence[tuple], op: Optional[str] = None) -> None:
    """``rows``: ``(name, rows)`` of each component whose leading axis is the batch's; ValueError where two differ.

    The engine checks the same on every put (c_code/python/tq_py_schema.c);
    this is its check for what is written into a slot from Python before the
    engine sees the rows (variable-length components, a Feeder's batches).
    """
    for other in rows[1:]:
        if other[1] != rows[0][1]:
            raise rows_error(queue_name, rows[0], other, op)


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

    An array is not copied: the copy into the slot casts it.
    """
    want = component.dtype
    if isinstance(value, np.ndarray):
        if value.dtype != want:
            _engine.check_array(value, want, queue_name, component.name)  # the engine's array rule
        return value
    if isinstance(value, np.generic):
        return component_value(component, np.asarray(value), queue_name)
    return python_value(component, value, queue_name, np.dtype(want))


def cast(component, value: Any, queue_name: str) -> np.ndarray:
    """``value`` as an array of the component's exact dtype, by the rule (a copy only where the dtype differs):
    what a path that holds the value as the component's own bytes (a held dataset, a pad value) asks for."""
    return component_value(component, value, queue_name).astype(component.dtype, copy=False)


def python_value(component, value: Any, queue_name: str, want: np.dtype) -> np.ndarray:
    """A Python number or (nested) list as an array of the component's dtype, each value kept or refused."""
    if holds_no_numbers(value):
        return np.asarray(value, want)  # [] is a row of length 0, whatever numpy's default dtype
    try:
        given = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise TypeError(
            "%s: cannot read %s as an array: %s" % (where(queue_name, component), type(value).__name__, exc)
        ) from None
    if given.dtype.kind in "fO" and is_python_ints(value):
        # Python ints that no one numpy integer holds (past 64 bits, or uint64's beside negative ones) are
        # read by numpy as floats or objects: judged as the ints they are.
        given, kind = np.array(value, dtype=object), "int"
    elif given.dtype.kind in "biufc":
        kind = given.dtype.name
    else:
        raise TypeError(
            "%s: expected numbers of dtype %s, got %s values" % (where(queue_name, component), want, given.dtype)
        )
    if _engine.values_fit(given, want):
        return given.astype(want)
    if want.kind in "biu" and given.dtype.kind in "fc" and _engine.has_nan(given):
        raise TypeError(WORDING["nan"] % (where(queue_name, component), want, given.dtype, given.dtype))
    raise TypeError(WORDING["fit"] % (where(queue_name, component), want, kind))


def is_python_ints(value) -> bool:
    """True for a Python int, or a (nested) list or tuple of them only."""
    if isinstance(value, (list, tuple)):
        return all(is_python_ints(v) for v in value)
    return type(value) is int


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
    if not _engine.casts_safely(np.dtype(variable.dtype), want):
        raise unsafe_dtype(queue_name, component, np.dtype(variable.dtype))
    return tensor.cast(variable, want.name)


class Schema:
    """A queue's schema: its components (the engine's, in slot order) and the rule applied to each.

    Made once per queue (:class:`~theano_queue.core.port.Port`), which turns the
    Python values of a put into arrays by it; the engine's put applies the
    array rule itself.
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
