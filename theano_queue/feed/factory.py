"""Which :class:`~.producers.Producer` a Feeder's arguments ask for, every argument checked on the way."""

from __future__ import annotations

import collections.abc
from typing import Any, Optional

import numpy as np

from .arrays import ArrayProducer
from .autotune import AutoLog
from .autoworkers import WorkerTuner, available_bytes
from .dispatcher import WorkerProducer, WorkerRun
from .held import HeldArrayProducer
from .producers import FillProducer, InlineMapProducer, IterableProducer, Producer
from .sampler import Sampler, shard_pair
from .sources import array_sources, bucket_lengths, dataset_length, is_map_style
from .startup import STARTUP_TIMEOUT_S, check_startup_timeout
from .state import iterable_skips, stream_lengths


def _count(value: Any, what: str, where: str, none_ok: bool = False) -> Optional[int]:
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError("%s: %s must be an int >= 0%s, got %r" % (where, what, " or None" if none_ok else "", value))
    return int(value)


def _shard(shard: Any, where: str) -> tuple:
    try:
        return tuple(shard_pair(shard))
    except ValueError as exc:
        raise ValueError("%s: %s" % (where, exc)) from None


def check_timeout(timeout: Any, workers: int, where: str, device: Any = False) -> Optional[float]:
    """``Feeder(timeout=...)``: seconds a worker may spend on one item (None: no limit)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)) or not timeout > 0:
        raise ValueError("%s: timeout must be a number of seconds > 0 or None, got %r" % (where, timeout))
    if device:  # device=True refuses workers too: advise nothing it refuses
        raise ValueError(
            "%s: timeout bounds what a worker process spends on one sample; with device=True the GPU gathers "
            "the rows and there are no workers: leave timeout out" % where
        )
    if not workers:
        raise ValueError(
            "%s: timeout bounds the time a worker process spends on one sample; with workers=0 the "
            "Feeder's own thread produces and cannot be interrupted: give workers >= 1" % where
        )
    return float(timeout)


#: The sources, each with the runner it has when neither workers nor the GPU are asked for.  Sources: a fill
#: function, an iterable of batches, a map-style dataset, an array dataset, one held in GPU memory
#: (device=True).  Runners: the Feeder's thread, worker processes, the engine's copy pool (native threads),
#: the GPU.
OWN_RUNNER = {"fill": "thread", "iterable": "thread", "map": "thread", "arrays": "copy pool", "held arrays": "gpu"}

_FILL_ALONE = (
    "a fill function runs in the feeder's thread alone; workers, shuffle, shard, drop_last, "
    "epochs, bucket_by, device and state need a dataset"
)
_DEVICE_NEEDS = (
    "device=True holds an array dataset in GPU memory: a tuple (component order) or dict (component "
    "names) of numpy arrays, one per component; got "
)

#: Every source x runner pair a Feeder's arguments can ask for: None where it is built, else why it is refused
#: (``{given}``: the type of the dataset given).  An array dataset with device=True is the held source, so
#: ("arrays", "gpu") is no pair.
PAIRS = {
    ("fill", "thread"): None,
    ("fill", "workers"): _FILL_ALONE,
    ("fill", "gpu"): _FILL_ALONE,
    ("iterable", "thread"): None,
    ("iterable", "workers"): None,
    ("iterable", "gpu"): _DEVICE_NEEDS + "an iterable of batches ({given})",
    ("map", "thread"): None,
    ("map", "workers"): None,
    ("map", "gpu"): _DEVICE_NEEDS + "a map-style dataset",
    ("arrays", "copy pool"): None,
    ("arrays", "workers"): "an array dataset is gathered by native threads in this process (the copy pool, "
    "theano_queue._engine.set_copy_threads); worker processes would only copy the same rows again: leave workers=0",
    ("held arrays", "gpu"): None,
    ("held arrays", "workers"): "with device=True the GPU gathers the rows from its own copy of the arrays; worker "
    "processes would have nothing to do: leave workers=0",
}


def source_of(dataset: Any, fill: Any, arrays: Optional[list], device: bool, where: str) -> str:
    """What feeds the queue: "fill", "arrays" ("held arrays" with device=True), "map" or "iterable"."""
    if fill is not None:
        return "fill"
    if arrays is not None:
        return "held arrays" if device else "arrays"
    if is_map_style(dataset):
        return "map"
    if hasattr(dataset, "__iter__"):
        return "iterable"
    raise TypeError(
        "%s: expected an iterable of batches or a map-style dataset, got %r" % (where, type(dataset).__name__)
    )


def runner_of(source: str, workers: int, device: bool, dataset: Any, where: str) -> str:
    """Who runs ``source``: the GPU (device=True), worker processes (workers >= 1), else the source's own
    runner; TypeError with the table's reason for a refused pair.  Asking for both is two pairs to allow."""
    asked = [name for name, on in (("gpu", device), ("workers", workers)) if on] or [OWN_RUNNER[source]]
    for chosen in asked:
        reason = PAIRS[source, chosen]
        if reason:
            raise TypeError("%s: %s" % (where, reason.format(given=type(dataset).__name__)))
    return asked[0]


def _flag(value: Any, name: str, meaning: str, where: str) -> None:
    """Refuses anything but a bool for a yes-or-no argument (an array's truth would be numpy's error)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError("%s: %s must be True (%s) or False, got %r" % (where, name, meaning, value))


def make_producer(
    feeder,
    port,
    dataset: Any,
    *,
    workers: Any,
    shuffle: bool,
    seed: int,
    shard,
    epochs: Any,
    drop_last: bool,
    state: Optional[dict],
    ordered: bool,
    start_method: Any,
    fill: Any,
    bucket_by: Any = None,
    bucket_window: Any = None,
    timeout: Any = None,
    device: Any = False,
    startup_timeout: Any = STARTUP_TIMEOUT_S,
    max_workers: Any = None,
    memory_budget: Any = None,
) -> Producer:
    """The producer for a Feeder's arguments: the source, the runner the table allows it, the source's own
    arguments checked, then built."""
    where = "Feeder(%s)" % port.name
    _flag(device, "device", "hold the array dataset in GPU memory and gather it there", where)
    _flag(shuffle, "shuffle", "a new order of the samples each epoch", where)
    _flag(drop_last, "drop_last", "leave out each epoch's last, partial batch", where)
    _flag(ordered, "ordered", "the workers' batches in the sampler's order", where)
    auto = isinstance(workers, str) and workers == "auto"
    tuner = _worker_tuner(port.auto_log(), max_workers, memory_budget, where) if auto else None
    if not auto:
        if max_workers is not None or memory_budget is not None:
            raise ValueError(
                "%s: max_workers and memory_budget bound workers='auto'; with workers=%r leave them out"
                % (where, workers)
            )
        workers = _count(workers, "workers", where)
    else:
        workers = 1  # a count for the table's checks: the tuner starts the run's own
    epochs = _count(epochs, "epochs", where, none_ok=True)
    timeout = check_timeout(timeout, workers, where, device)
    startup_timeout = check_startup_timeout(startup_timeout, where)
    arrays = None if fill is not None else array_sources(dataset, port.components, port.name)
    source = source_of(dataset, fill, arrays, device, where)
    runner = runner_of(source, workers, device, dataset, where)
    # The workers' own arguments.
    pool = dict(seed=seed, ordered=ordered, start_method=start_method, timeout=timeout, startup_timeout=startup_timeout)
    if auto and not (source == "map" and runner == "workers"):
        raise ValueError(
            "%s: workers='auto' tunes the worker processes of a map-style dataset; %s. Give a number of workers"
            % (
                where,
                "an iterable's streams depend on tq.worker_info(), so their number cannot change while it runs"
                if source == "iterable"
                else "this dataset is not one",
            )
        )
    if source == "fill":
        _fill_arguments(shuffle, shard, drop_last, epochs, state, bucket_by, bucket_window, where)
        return FillProducer(feeder, port, fill)
    if source == "iterable":
        skips = _iterable_arguments(
            dataset, workers, shuffle, shard, drop_last, epochs, state, bucket_by, bucket_window, where
        )
        if runner == "thread":
            return IterableProducer(feeder, port, dataset, epochs, skips[0])
        plan = WorkerRun("iter", skips=skips, epochs=epochs, **pool)
        return WorkerProducer(feeder, port, dataset, workers, plan)
    _rows_arguments(port, dataset, source, where)
    sampler, cursor = _sampler(
        port, dataset, arrays, shuffle, seed, shard, drop_last, epochs, state, bucket_by, bucket_window, where
    )
    if source == "held arrays":
        return HeldArrayProducer(feeder, port, arrays, sampler, cursor)
    if source == "arrays":
        return ArrayProducer(feeder, port, arrays, sampler, cursor)
    if runner == "thread":
        return InlineMapProducer(feeder, port, dataset, sampler, cursor)
    plan = WorkerRun("map", sampler=sampler, cursor=cursor, tuner=tuner, **pool)
    return WorkerProducer(feeder, port, dataset, workers, plan)


def _worker_tuner(log: AutoLog, max_workers: Any, memory_budget: Any, where: str) -> WorkerTuner:
    """The tuner of ``workers="auto"``, recording in ``log`` (the queue's, where every tuner of it records):
    max_workers (>= 1) and memory_budget (bytes; half the available memory when not given) checked."""
    if max_workers is not None:
        if isinstance(max_workers, bool) or not isinstance(max_workers, (int, np.integer)) or max_workers < 1:
            raise ValueError("%s: max_workers must be an int >= 1 or None, got %r" % (where, max_workers))
        max_workers = int(max_workers)
    if memory_budget is None:
        available = available_bytes()
        memory_budget = available // 2 if available else None
    elif isinstance(memory_budget, bool) or not isinstance(memory_budget, (int, np.integer)) or memory_budget < 1:
        raise ValueError("%s: memory_budget must be a number of bytes >= 1 or None, got %r" % (where, memory_budget))
    return WorkerTuner(log, max_workers, None if memory_budget is None else int(memory_budget))


def _fill_arguments(shuffle, shard, drop_last, epochs, state, bucket_by, bucket_window, where):
    """A fill function's own arguments checked: it writes each batch itself, so choosing samples is no
    argument of its own."""
    if (
        shuffle
        or state is not None
        or _shard(shard, where) != (0, 1)
        or drop_last
        or epochs != 1
        or bucket_by is not None
        or bucket_window is not None
    ):
        raise TypeError("%s: %s" % (where, _FILL_ALONE))  # the sampling arguments are a dataset's


def _iterable_arguments(dataset, workers, shuffle, shard, drop_last, epochs, state, bucket_by, bucket_window, where):
    """An iterable's own arguments checked: it yields whole batches in its own order, as often as it can be
    run; the batches ``state`` has each stream skip."""
    if bucket_by is not None or bucket_window is not None:
        raise ValueError(
            "%s: bucket_by groups the samples of a map-style dataset (or an array dataset) into "
            "batches; an iterable yields whole batches already" % where
        )
    if shuffle or _shard(shard, where) != (0, 1) or drop_last:
        if isinstance(dataset, list) and dataset and all(getattr(a, "ndim", 0) >= 1 for a in dataset):
            # [X, y]: meant as arrays, taken as a list of batches (issue 41).
            raise ValueError(
                "%s: shuffle, shard and drop_last choose the rows of an array dataset; a list of %d arrays "
                "is taken as an iterable of whole batches: pass a tuple (X, y) for an array dataset, one "
                "array per component" % (where, len(dataset))
            )
        if isinstance(dataset, np.ndarray) and dataset.ndim >= 1:
            # X for a one-component queue: meant as rows, taken as batches, as a list would be.
            raise ValueError(
                "%s: shuffle, shard and drop_last choose the rows of an array dataset; a numpy array alone is "
                "taken as an iterable of whole batches (one per item of its first axis): pass a tuple (X,) for "
                "an array dataset of one component" % where
            )
        raise ValueError(
            "%s: shuffle, shard and drop_last choose the samples of a map-style dataset (__len__ and "
            "__getitem__ giving one sample); an iterable yields whole batches in its own order: split "
            "it with tq.worker_info() and your rank yourself" % where
        )
    if epochs != 1 and isinstance(dataset, collections.abc.Iterator):
        raise ValueError(
            "%s: epochs=%r needs an iterable that can be run again (a list, or an object whose "
            "__iter__ starts over); a generator or iterator runs once" % (where, epochs)
        )
    try:
        return iterable_skips(state, max(workers, 1), stream_lengths(dataset, epochs, max(workers, 1)))
    except ValueError as exc:
        raise ValueError("%s: %s" % (where, exc)) from None


def _rows_arguments(port, dataset, source, where):
    """A dataset of samples against the queue's variable-length components: an array holds rows of one
    shape, ``read_into`` writes into rows of fixed shape."""
    layout = port.layout
    if not layout.varying:
        return
    names = ", ".join(map(repr, layout.variable_names()))
    if source != "map":
        raise TypeError(
            "%s: an array dataset holds rows of one shape; component(s) %s have a variable (upto) axis: "
            "give a map-style dataset whose samples have their own lengths" % (where, names)
        )
    if getattr(dataset, "read_into", None) is not None:
        raise TypeError(
            "%s: read_into(i, row) writes into rows of fixed shape; with variable-length "
            "component(s) %s the feeder reads dataset[i] instead: remove read_into" % (where, names)
        )


def _sampler(port, dataset, arrays, shuffle, seed, shard, drop_last, epochs, state, bucket_by, bucket_window, where):
    """The Sampler of a map-style or array dataset, and the cursor ``state`` resumes from."""
    flat = [c.name for c in port.components if not c.batched]
    if flat:
        raise ValueError(
            "%s: a map-style dataset gives one sample per row, but component(s) %s have no batch "
            "axis" % (where, ", ".join(map(repr, flat)))
        )
    sizes = {c.shape[0] for c in port.components}
    if len(sizes) != 1:
        raise ValueError(
            "%s: a map-style dataset fills every component with the same number of rows; the "
            "components' leading axes differ: %s"
            % (where, ", ".join("%s: %d" % (c.name, c.shape[0]) for c in port.components))
        )
    try:
        sampler = Sampler(
            len(arrays[0]) if arrays else dataset_length(dataset, where),
            sizes.pop(),
            shuffle,
            seed,
            shard,
            drop_last,
            epochs,
            bucket_lengths(bucket_by, dataset, arrays),
            bucket_window,
        )
        return sampler, sampler.cursor(state)
    except ValueError as exc:
        raise ValueError("%s: %s" % (where, exc)) from None
