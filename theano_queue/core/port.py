"""What a producer holds of a queue: the ring and the put/writer core, not the Queue object.

A Feeder's thread and producers hold a :class:`Port`, so that a Queue (and
its Feeder) that the user drops is collected: ``Queue.__del__`` closes the
ring, and the producer still running ends with QueueClosed.  The port's
:attr:`~Port.run` (theano_queue/core/run.py) is the one owner of the queue's run:
the Feeders attached, the reopen count, who closes the queue and when.
"""

import contextlib
from collections.abc import Mapping

import numpy as np

from . import device_arrays as _device
from .errors import QueueError
from .layout import Padded
from .run import QueueRun
from .schema import Schema
from .spec import element_in_order


def element_of(args):
    """The arguments of put/enqueue as one element.

    ``(x, y)``, ``((x, y),)`` and ``({"x": x, "y": y},)`` all name one element.
    """
    if isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], (tuple, list, Mapping)):
        return args[0]
    return args


class Port:
    """The host-side core of a queue: ``put`` (every host path checked by put's rules) and ``writer``."""

    def __init__(self, name, components, layout, target, ring):
        self.name, self.components, self._layout, self._target, self._ring = name, components, layout, target, ring
        #: The one rule for every value put (theano_queue/core/schema.py): Python values become arrays by it; the
        #: engine applies its array rule itself (its table is the engine's, c_code/engine/core/tq_scalar.h).
        self.schema = Schema(name, layout.engine)
        ring.batch = layout.engine_batch  # whose rows must agree in an element, and the names they go by
        #: The queue's run: attach, generation, close, cancel and reopen (theano_queue/core/run.py).
        self.run = QueueRun(name, ring)
        #: What the self-tuning of this queue and its Feeders decided (theano_queue/feed/autotune.py's AutoLog),
        #: made by the first knob set to "auto" (:meth:`auto_log`); None while nothing is tuned.
        self.auto = None

    def auto_log(self):
        """The queue's AutoLog, made on first use: every tuner of the queue and its Feeders records there."""
        if self.auto is None:
            from ..feed.autotune import AutoLog

            self.auto = AutoLog()
        return self.auto

    on_gpu = property(lambda self: self._target.on_gpu)
    # What producers and the graph front ends read of the queue; the put path below uses the attributes.
    ring = property(lambda self: self._ring, doc="The engine's ring (theano_queue._engine.Ring).")
    layout = property(
        lambda self: self._layout, doc="How components map onto the engine's (theano_queue/core/layout.py)."
    )
    target = property(lambda self: self._target, doc="Where the ring lives (theano_queue/core/target.py).")

    def pretend_target(self, target):
        """Queue._pretend_target's seam (tests/support/pretend.py): report ``target``, the ring staying put."""
        self._target = target

    def put(self, element, timeout, stop=None, lengths=None, stream=None):
        """Queue.put; a wait that ``stop`` (an ``_engine.Stop``) ends with Stopped."""
        if lengths is None and not self._layout.varying:
            if stream is None and _all_arrays(element, len(self.components)):
                return self._ring.put(element, timeout, stop)  # the engine checks dtypes and shapes
            readers = self._device_readers(element)
            if readers is not None:  # q.put(x, y) of device arrays: what _put_from_device checks holds
                return _device.put_fixed(
                    self._ring, self.components, element, readers, self.name, timeout, stop, stream
                )
        element = element_of(element)
        if type(element) is tuple and len(element) == 1 and len(self.components) > 1:
            element = element[0]  # q.put(x) on a queue of more: element_in_order says "a bare array", as for a Feeder
        values = element_in_order(self.components, element, self.name)
        # Asked once per value: how a device put reads it (None for host data).
        readers = [_device.reader_of(v.data if isinstance(v, Padded) else v) for v in values]
        if any(readers):
            return self._put_from_device(values, readers, timeout, stop, stream, lengths)
        if stream is not None:
            raise ValueError("Queue.put: queue %r: stream is for device arrays; these are host data" % self.name)
        if not self._layout.varying:
            if lengths is not None:
                self._layout.refuse_lengths(self.name, "put")
            values = [v if type(v) is np.ndarray else self.schema.value(i, v) for i, v in enumerate(values)]
            return self._ring.put(values, timeout, stop)  # the engine checks arrays: dtype, shape, rows
        write = self._layout.prepare(self._layout.with_lengths(values, lengths, self.name), self.name)
        # Packed straight into the slot's staging: the only copy on the host.
        slot, views = self._ring.reserve(timeout, stop)
        try:
            rows = write(views)
        except BaseException:
            self._ring.abort(slot)
            raise
        return self._ring.commit(slot, rows)

    def put_given(self, box, timeout, stop=None):
        """put(box's one element) for a producer that keeps nothing of it: box (a list of one) is emptied.

        When nothing else holds the element's arrays either (a batch made by
        fancy indexing, ``x[idx]``, and yielded), the ring's putter thread
        copies them after this returns, and the producer's thread keeps the
        GIL (doc/design.rst, "The GIL and a Feeder over an iterable").  A
        small element of a host queue is copied at once, the GIL held.
        Anything else is put as :meth:`put` puts it.  Refused, the element
        stays in box.  ``flush_given`` waits for the putter's copies.
        """
        if not self._layout.varying and (_all_arrays(box[0], len(self.components)) or _bare_array(box[0], self)):
            return self._ring.put_given(box, timeout, stop)
        size = self.put(box[0], timeout, stop)
        box.clear()
        return size

    def flush_given(self):
        """Waits until every element of :meth:`put_given` is in the queue; raises the first that failed."""
        self._ring.flush_given()

    def _device_readers(self, element):
        """The readers of a tuple of device arrays, one per component, for a GPU queue; None for anything else.

        The element of a device producer's ``q.put(x, y)``, spared the general
        path's work per put (``element_in_order``, ``_put_from_device``'s
        checks): it is in component order, every value is on the device, the
        queue on a GPU.
        """
        if type(element) is not tuple or len(element) != len(self.components) or not self._target.on_gpu:
            return None
        readers = []
        for value in element:
            reader = _device.reader_of(value)
            if reader is None:
                return None  # host data: the general path
            readers.append(reader)
        if len(element) == 1 and _is_mapping(element[0]):
            return None  # q.put(mapping): it names the components
        return readers

    def _put_from_device(self, values, readers, timeout, stop, stream, lengths):
        if not all(readers):
            host = [c.name for c, reader in zip(self.components, readers) if not reader]
            raise TypeError(
                "Queue %r: an element is put from device memory or from host memory, not both; "
                "components %s are host data" % (self.name, ", ".join(map(repr, host)))
            )
        if not self.on_gpu:
            raise QueueError(
                "Queue %r lives in host memory; put device arrays into a GPU queue, or copy "
                "them to the host first" % self.name
            )
        upload = None
        if self._layout.varying:
            from theano.gpuarray.type import get_context

            values = self._layout.with_lengths(values, lengths, self.name)
            upload = _device.uploader(get_context(self._target.context_name))
        elif lengths is not None:
            self._layout.refuse_lengths(self.name, "put")
        return _device.put(self._ring, self._layout, values, self.name, timeout, stop, stream, upload, readers)

    @contextlib.contextmanager
    def writer(self, timeout, stop=None):
        """writer(), and a wait that ``stop`` (an ``_engine.Stop``) ends with Stopped."""
        slot, views = self._ring.reserve(timeout, stop)
        writer = SlotWriter(self.components, views, self._layout)
        try:
            yield writer
            rows = writer.engine_rows(self.name)  # packs variable-length components in place
        except BaseException:
            self._ring.abort(slot)
            raise
        finally:
            writer.seal()
        self._ring.commit(slot, rows)


def _all_arrays(element, n):
    """True for a tuple of n numpy arrays: already what the engine takes (it checks dtypes and shapes).

    The common element of a Feeder's source, spared element_arrays' Python
    work per batch: the feeder's thread holds the GIL for less time.
    """
    if type(element) is not tuple or len(element) != n:
        return False
    for value in element:
        if type(value) is not np.ndarray:
            return False
    return True


def _bare_array(value, port):
    """True for a bare numpy array put into a queue of one component (it is that component)."""
    return type(value) is np.ndarray and len(port.components) == 1


_mapping_types: dict[type, bool] = {}  # type -> whether it is a Mapping: isinstance asks the ABC's registry every time


def _is_mapping(value):
    kind = type(value)
    known = _mapping_types.get(kind)
    if known is None:
        known = _mapping_types[kind] = isinstance(value, Mapping)
    return known


class SlotWriter:
    """The slot :meth:`~theano_queue.Queue.writer` hands out: writable views, one per component.

    A variable-length component's view is shaped at its bounds, and
    :attr:`lengths` holds each row's length there, by component name.
    """

    def __init__(self, components, views, layout=None):
        self.components = components
        self.layout = layout
        self.engine_views = views
        if layout is not None and layout.varying:
            self.arrays, self.lengths = layout.staged(views)
        else:
            self.arrays, self.lengths = views, {}
        #: Rows written along the batch axis; None means full.
        self.rows = None

    def __getitem__(self, name):
        for component, view in zip(self.components, self.arrays):
            if component.name == name:
                return view
        raise KeyError("no component %r; the components are %s" % (name, [c.name for c in self.components]))

    def rows_per_component(self, queue_name):
        """Rows per component: :attr:`rows` (one number: the batch's) for each batched one, a component of an
        axis of its own whole, a scalar 1."""
        rows = self.rows
        if rows is not None:
            if isinstance(rows, (bool, np.bool_)) or not isinstance(rows, (int, np.integer)):
                raise TypeError(
                    "Queue.writer: queue '%s': slot.rows is the number of rows written along the batch axis, one "
                    "int for every component, got %r" % (queue_name, rows)
                )
        return [(c.shape[0] if rows is None or not c.batched else int(rows)) if c.shape else 1 for c in self.components]

    def engine_rows(self, queue_name):
        """Rows per engine component, packing variable-length components to their longest row first."""
        rows = self.rows_per_component(queue_name)
        if self.layout is None or not self.layout.varying:
            return rows
        return self.layout.finish(self.engine_views, rows, queue_name)

    def seal(self):
        for view in list(self.arrays) + list(self.engine_views):
            view.flags.writeable = False
