"""What a Feeder is given: telling a map-style dataset, an array dataset and an iterable apart, and reading them.

* :func:`is_map_style`: one sample per index (``__len__`` and ``__getitem__``).
* :func:`array_sources`: a tuple or dict of arrays, one per component, checked.
* :func:`stream`: an iterable run for a number of epochs, from a resume point.
* :func:`bucket_lengths`: ``Feeder(bucket_by=...)`` as the Sampler's length function.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..core import schema
from .info import worker_info

_NOT_MAP_STYLE = (list, tuple, dict, np.ndarray, str, bytes, bytearray, memoryview, range)


def is_map_style(dataset: Any) -> bool:
    """True for a map-style dataset: ``__len__`` and ``__getitem__``, one sample per index.

    Lists, tuples, dicts, ranges, strings and arrays are not (a list of
    batches is an iterable of batches, as before), nor is anything that is a
    PyTorch-style ``IterableDataset``.
    """
    if isinstance(dataset, _NOT_MAP_STYLE):
        return False
    if any(cls.__name__ == "IterableDataset" for cls in type(dataset).__mro__):
        return False
    return hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")


def array_sources(dataset: Any, components, queue_name: str) -> Optional[list]:
    """The arrays of an array dataset in component order, checked; None when ``dataset`` is not one.

    An array dataset is a tuple (or a dict keyed by component name) of numpy
    arrays (``np.memmap`` included), one per component; a list is a list of
    batches.  The checks are put's (:mod:`.check`): the dtype must be the
    component's or cast to it safely (cast batch by batch as the rows are
    gathered), each row shaped like the component without its batch axis;
    every array has the same number of rows.  Nothing is copied here.
    """
    where = "Feeder(%s)" % queue_name
    names = [c.name for c in components]
    if isinstance(dataset, dict):
        if not dataset or not all(isinstance(v, np.ndarray) for v in dataset.values()):
            return None
        if sorted(dataset) != sorted(names):
            raise ValueError(
                "%s: an array dataset given as a dict needs one array per component, keyed %s; got %s"
                % (where, names, sorted(dataset))
            )
        arrays = [dataset[name] for name in names]
    elif isinstance(dataset, tuple) and is_arrays(dataset):
        if len(dataset) != len(components):
            raise ValueError(  # worded as element_in_order words an element of the wrong count
                "Queue %r: expected %d components (%s), got %d array%s: an array dataset has one array per "
                "component" % (queue_name, len(names), ", ".join(names), len(dataset), "" if len(dataset) == 1 else "s")
            )
        arrays = list(dataset)
    else:
        return None
    for component, array in zip(components, arrays):
        if not component.batched:
            raise ValueError(
                "%s: component %r has no batch axis: an array dataset gives every component rows"
                % (where, component.name)
            )
        if not isinstance(array, np.ndarray):  # a numpy scalar beside arrays: one value, not one per row
            raise ValueError(
                "%s: an array dataset holds rows of every component; got a numpy %s scalar: give an array with one "
                "value per row, e.g. np.full(%d, value)"
                % (schema.where(queue_name, component), array.dtype, next((len(a) for a in arrays if np.ndim(a)), 1))
            )
        schema.component_value(component, array, queue_name)
        if array.ndim != len(component.shape) or array.shape[1:] != tuple(component.shape[1:]):
            raise ValueError(
                "%s: expected rows of shape %s (the component's without its batch axis), got an array of shape %s"
                % (schema.where(queue_name, component), tuple(component.shape[1:]), array.shape)
            )
    schema.check_rows(queue_name, [(c.name, len(a)) for c, a in zip(components, arrays)])
    return arrays


def is_arrays(dataset: tuple) -> bool:
    """True for a tuple of numpy arrays (an array dataset), numpy scalars among them: a tuple that holds one
    value per component is one dataset, checked at once, never a list of batches each refused at the consumer."""
    return any(isinstance(v, np.ndarray) for v in dataset) and all(
        isinstance(v, (np.ndarray, np.generic)) for v in dataset
    )


def dataset_length(dataset: Any, where: str) -> int:
    """``len(dataset)`` of a map-style dataset; TypeError naming its ``__len__`` when that gives no count."""
    given = type(dataset).__len__(dataset)
    if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < 0:
        raise TypeError(
            "%s: len(dataset) gave %r: %s.__len__ must return the number of samples, an int >= 0"
            % (where, given, type(dataset).__name__)
        )
    return int(given)


def stream(dataset: Any, epochs: Optional[int], skip: int = 0, timer=None) -> Iterator[Any]:
    """The elements of ``epochs`` passes over ``dataset`` (None: without end), the first ``skip`` left out.

    In a worker, a list or tuple of batches is cut up: worker ``id`` of
    ``count`` (see :func:`~theano_queue.worker_info`) takes every ``count``-th
    element of the epochs laid end to end, starting at its ``id``.  Other
    iterables split themselves.

    The left-out elements are still produced (an iterable cannot jump); an
    iterable that ends before ``skip`` of them raises :func:`past_the_end`'s
    ValueError, as a list's state is refused before the run.  A pass that
    yields nothing ends the stream.  With ``timer``, the time spent inside
    the dataset's ``next()`` is added to ``timer.busy``.
    """
    me, count = worker_info()
    given = 0  # elements the iterable gave, skipped ones included
    if isinstance(dataset, (list, tuple)) and count > 1:
        # A list cannot split itself: worker `me` takes elements me, me + count, ... of all the epochs
        # one after another, so that the workers taking turns give the list's order back.
        n, j = len(dataset), me
        while n and (epochs is None or j < epochs * n):
            element, j = dataset[j % n], j + count
            if skip:
                skip -= 1
                continue
            yield element
        return
    epoch = 0
    while epochs is None or epoch < epochs:
        iterator = iter(dataset)
        if epoch and iterator is dataset:
            raise ValueError(
                "epochs=%r needs an iterable that can be run again (a list, or an object whose "
                "__iter__ starts over); this one is an iterator, which runs once" % (epochs,)
            )
        empty = True
        while True:
            started = time.perf_counter()
            try:
                element = next(iterator)
            except StopIteration:
                break
            finally:
                if timer is not None:
                    timer.busy += time.perf_counter() - started
            empty = False
            given += 1
            if skip:
                skip -= 1
                continue
            # Handed over in a box the frame empties: the stream keeps no reference to an element it gave, so
            # that a put may find the element's arrays held by nothing else (Port.put_given).
            box = [element]
            del element
            yield box.pop()
        if empty:
            break
        epoch += 1
    if skip:
        raise past_the_end([(me, given + skip, given)])


def past_the_end(streams) -> ValueError:
    """A saved state that resumes past the run's end: ``streams`` holds (stream, consumed, elements it gives)."""
    return ValueError(
        "the state's consumed lies past this run's end: it was saved from another dataset or more epochs, and "
        "resuming would give an empty run:"
        + "".join(
            "\n  stream %d: consumed=%d, but this run gives it %d element(s): at most %d" % (me, c, n, n)
            for me, c, n in streams
        )
    )


class BucketError(ValueError):
    """``bucket_by`` raised, or gave no length, for a sample."""


def bucket_lengths(bucket_by: Any, dataset: Any, arrays: Optional[list]) -> Optional[Callable]:
    """The Sampler's length function for ``Feeder(bucket_by=...)``: indices -> lengths.

    ``bucket_by`` is a function of one sample (``dataset[i]``, or the tuple of
    an array dataset's rows ``i``), called in the Feeder's thread, or an
    array of every sample's length.  What it raises, or a length that is no
    number, is a :class:`BucketError` naming the sample.  (The caller names the Feeder.)
    """
    if bucket_by is None:
        return None
    if not callable(bucket_by):
        given = np.asarray(bucket_by)
        count = len(arrays[0]) if arrays is not None else len(dataset)
        if given.shape != (count,) or given.dtype.kind not in "iu":
            raise ValueError(
                "bucket_by must be a function of a sample or an int array of the %d samples' "
                "lengths, got %r" % (count, bucket_by if given.ndim == 0 else given.shape)
            )
        return lambda indices: given[indices]
    sample = (lambda i: tuple(a[i] for a in arrays)) if arrays is not None else dataset.__getitem__

    def lengths(indices):
        out = []
        for i in indices.tolist():
            try:
                length = bucket_by(sample(i))
            except Exception as exc:
                raise BucketError("bucket_by raised on sample %d: %s: %s" % (i, type(exc).__name__, exc)) from exc
            if isinstance(length, bool) or not isinstance(length, (int, float, np.integer, np.floating)):
                raise BucketError("bucket_by gave %r for sample %d; expected its length (a number)" % (length, i))
            out.append(length)
        return out

    return lengths
