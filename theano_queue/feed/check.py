"""The one door: every value from every producer is checked here, by ``Queue.put``'s rules and messages.

* dtype: an array of the component's dtype, or of one that casts to it
  safely (numpy's ``can_cast(..., "safe")``); Python values where numpy calls
  their cast safe (:func:`~theano_queue.spec.as_component_value`).
* count: one value per component (a tuple, a dict keyed by name, or a bare
  array for a one-component queue).
* shape: a whole batch may be short on its leading axis (a partial batch);
  a sample has the component's shape without the batch axis.

:func:`batch_writer` checks a whole batch (what an iterable yields and
``Queue.put`` takes); :func:`write_sample` checks one sample of a map-style
dataset as it is written into its row.  Both run before anything is
committed: a bad value costs the queue nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..spec import as_component_value, element_in_order, unsafe_cast_message


def where(queue_name: str, component) -> str:
    return "Queue %r, component %r" % (queue_name, component.name)


def checked_value(component, value: Any, queue_name: str) -> np.ndarray:
    """``value`` as an array whose dtype casts safely to the component's (TypeError otherwise)."""
    if not isinstance(value, np.ndarray):
        value = as_component_value(component, value, queue_name)
    if value.dtype != component.dtype and not np.can_cast(value.dtype, component.dtype, "safe"):
        raise TypeError(unsafe_cast_message(where(queue_name, component), component.dtype, value.dtype))
    return value


def batch_writer(layout, element: Any, queue_name: str) -> Callable[[Sequence[np.ndarray]], list]:
    """A whole batch checked as ``Queue.put`` checks it; returns ``write(engine views) -> engine rows``."""
    return layout.prepare(element_in_order(layout.components, element, queue_name), queue_name)


def write_sample(layout, row: Sequence[np.ndarray], sample: Any, lengths: dict, r: int, queue_name: str) -> None:
    """Checks one sample and writes it into ``row`` (views at the bounds), row ``r`` of ``lengths``.

    A variable-length component's sample is written at the start of its row
    and its lengths into ``lengths[name][r]``; the element is packed once all
    its rows are written (``Layout.finish``).
    """
    values = element_in_order(layout.components, sample, queue_name)
    for i, (component, dst, value) in enumerate(zip(layout.components, row, values)):
        variable = layout.variables.get(i)
        if variable is not None:
            lengths[component.name][r] = variable.write_row(dst, np.asarray(value), queue_name)
            continue
        value = checked_value(component, value, queue_name)
        if value.shape != dst.shape:
            raise ValueError(
                "%s: expected shape %s for a sample (the component's without its batch axis), got %s"
                % (where(queue_name, component), dst.shape, value.shape)
            )
        dst[...] = value
