"""The one door: every value from every producer is checked here, by ``Queue.put``'s rules and messages.

* dtype: the queue's schema decides (:func:`theano_queue.core.schema.component_value`,
  the one rule: an array of the component's dtype or of one that casts to it
  safely; Python values where the cast keeps them).
* count: one value per component (a tuple, a dict keyed by name, or a bare
  array for a one-component queue).
* shape: a whole batch may be short on its leading axis (a partial batch);
  a sample has the component's shape without the batch axis.
* rows: a batch's components agree on their leading (batch) axis
  (:func:`theano_queue.core.schema.check_rows`), but for one declared with an
  axis of its own (:class:`theano_queue.own`); a sample is one row of each.

:func:`batch_writer` checks a whole batch (what an iterable yields and
``Queue.put`` takes); :func:`write_sample` checks one sample of a map-style
dataset as it is written into its row.  Both run before anything is
committed: a bad value costs the queue nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..core import schema
from ..core.schema import where
from ..core.spec import element_in_order


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
            lengths[component.name][r] = variable.write_row(dst, value, queue_name)
            continue
        value = schema.component_value(component, value, queue_name)
        if value.shape != dst.shape:
            raise ValueError(
                "%s: expected shape %s for a sample (the component's without its batch axis), got %s"
                % (where(queue_name, component), dst.shape, value.shape)
            )
        dst[...] = value
