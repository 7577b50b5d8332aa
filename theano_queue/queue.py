"""Queue: a bounded FIFO of batches that compiled Theano graphs dequeue from."""
import contextlib
import itertools
from collections.abc import Mapping

import numpy as np

from . import device as _device
from . import target as _target
from .errors import QueueError
from .layout import Layout, Padded
from .spec import as_component_value, check_queue_name, element_in_order, parse_components

_names = itertools.count()


class Queue:
    """A bounded FIFO of elements, each one batch of every component.

    ::

        q = Queue([("x", "float32", (128, 64)), ("y", "int32", (128,))], capacity=3)
        x, y = q.dequeue()            # symbolic: use them to build the graph
        q.put(x_batch, y_batch)       # or q.put({"x": ..., "y": ...}), or a Feeder

    Parameters
    ----------
    components : list
        ``(name, dtype, shape)`` tuples, one per component.  ``dtype`` is one
        of Theano's (bool, intN, uintN, floatN, complexN).  ``shape[0]``
        bounds the batch axis: an element may be shorter there (a partial
        last batch) and the dequeued variable then has that length.  The
        other axes are fixed, but for those marked :class:`~theano_queue.upto`
        (variable length, e.g. ``(64, tq.upto(512))``): each element is
        padded to its own longest row there, and carries each row's length.
    capacity : int
        Elements the queue holds at most (1 to 4096); producers wait when it
        is full.  The ring must fit in host memory (and, on a GPU, in free
        device memory): a queue that cannot is refused here.
    target : str or None
        ``None``, ``"cpu"`` or a Theano GPU context name: where the ring's
        slots live.  ``None`` means the GPU Theano runs on, else host memory;
        ``"cpu"`` forces host memory.
    timeout : float or None
        Seconds a wait for an element or a free slot lasts before it raises
        :class:`QueueTimeout`: dequeue and enqueue nodes, and ``put``, ``get``
        and ``writer`` called without a timeout of their own.  ``None`` waits
        until an element or a slot comes or the queue is closed.
    name : str
        Used in error messages and statistics.
    pad_value : float, dict or None
        What the padding of variable-length components holds: one number for
        all of them, or by component name, e.g. ``{"tokens": -1}`` (0 for
        those left out).
    broadcastable : dict or None
        The axes of a component's dequeued variable that broadcast, by
        component name, e.g. ``{"x": (1,)}`` for ``("x", "float32", (50, 1,
        28, 28))``.  By default none does: the convention of ``T.tensor4``,
        ``T.matrix`` and ``theano.shared``, so a dequeued variable and one of
        those are interchangeable (``givens``).
    """

    def __init__(self, components, capacity=2, target=None, timeout=None, name=None, pad_value=None,
                 broadcastable=None):
        self.name = check_queue_name(name) if name is not None else "queue%d" % next(_names)
        self.components = parse_components(components, self.name, pad_value, broadcastable)
        # The engine holds variable-length components as fixed ones (theano_queue/layout.py).
        self._layout = Layout(self.components)
        capacity = _target.check_capacity(capacity, self.name)
        self._target = _target.resolve(target, self.name)
        self._ring = _target.make_ring(self._target, self.name, self._layout.engine, capacity, timeout)
        self._tokens = itertools.count()

    def __del__(self):
        # The last user reference is gone, but a thread may still be blocked in
        # a function that dequeues from the ring (it holds the ring, not the
        # Queue): closing wakes it with QueueClosed instead of leaving it there.
        ring = getattr(self, "_ring", None)
        if ring is not None:
            try:
                ring.close()
            except QueueError:
                pass  # inherited by a forked child, which must leave the parent's ring alone

    def __reduce_ex__(self, protocol):
        from .ops import unpicklable_message

        raise TypeError(unpicklable_message(self.name))

    def __repr__(self):
        spec = ", ".join("%s:%s%s" % (c.name, c.dtype, c.shape) for c in self.components)
        state = "closed" if self.closed else "open"
        return "<Queue %r [%s] %d/%d %s, %s>" % (self.name, spec, self.size(), self.capacity, state, self.target)

    # ---- graph side -------------------------------------------------------------

    def dequeue(self, lengths=False):
        """Symbolic variables for the next element: one per component (a bare variable if one).

        A component with variable axes comes padded to this element's own
        extent: ``(n, L)`` for ``(64, tq.upto(512))``, ``L`` its longest row.
        With ``lengths=True`` each such component's row lengths follow the
        components, as int64 vectors (``(n, k)`` matrices for ``k`` variable
        axes), in component order::

            tokens, labels, tokens_lengths = q.dequeue(lengths=True)
            mask = tensor.arange(tokens.shape[1]) < tokens_lengths[:, None]

        Each call makes its own node: a function with two of them takes two
        elements per call, in the order the calls were made.

        Theano compiles only what a function's outputs depend on: a dequeue
        none of whose variables the outputs (or updates) use is dropped from
        that function and takes no element.  A function built from
        ``(x1, _), (x2, _) = q.dequeue(), q.dequeue()`` whose outputs use only
        ``x1`` takes one element per call.  To take an element and discard
        it, use its value somewhere, e.g. return it.
        """
        from .ops import Dequeue

        if lengths:
            self._layout.refuse_lengths(self.name, "dequeue")
        # One node for the whole element: a function that uses any of its outputs takes one element.
        engine = Dequeue(self._layout.engine, self.name).make_node(self._token()).outputs
        outputs = self._layout.graph_outputs(engine, lengths)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def enqueue(self, *variables, lengths=None):
        """A symbolic int64 scalar, the queue's size after putting ``variables``.

        Put it among a function's outputs (or in a graph they depend on) and
        every call of the function puts one element.  Accepts the variables
        in component order or one mapping keyed by component name.

        A variable-length component takes its padded variable; ``lengths``
        maps its name to a variable of its row lengths (default: every row
        is as long as the variable).  Positions past a row's length are
        enqueued as the component's ``pad_value``.
        """
        from .ops import Enqueue

        element = element_in_order(self.components, self._element(variables), self.name)
        if not self._layout.varying and lengths is not None:
            self._layout.refuse_lengths(self.name, "enqueue")
        element = self._layout.graph_inputs(element, lengths, self.name)
        return Enqueue(self._layout.engine, self.name)(self._token(), *element)

    def _token(self):
        """A fresh graph input that ties one node to this queue.

        Every node gets its own, so Theano never merges two dequeues into one,
        and the compiled code (which sees only a weak reference) is the same
        for every queue of the same components: compiled once, cached.
        """
        from .ops import make_token

        return make_token(self._ring, self.name, next(self._tokens), self._target)

    # ---- host side ----------------------------------------------------------------

    def put(self, *element, timeout=None, lengths=None, stream=None):
        """Put one element, waiting up to ``timeout`` seconds for a free slot.

        ``q.put(x, y)``, ``q.put((x, y))`` or ``q.put({"x": x, "y": y})``.
        ``timeout=None`` uses the queue's timeout; ``math.inf`` waits without
        limit.  Returns the queue's size after the put.  Raises
        TypeError/ValueError on an element that does not fit (nothing is put),
        QueueClosed once closed, QueueTimeout when no slot came free in time.

        On a GPU queue the arrays may also be **device arrays**: objects with
        ``__cuda_array_interface__`` (pycuda, CuPy, Numba, torch), CUDA
        ``__dlpack__`` producers, or pygpu ``GpuArray`` (every component of
        an element alike).  They are copied device to device on the queue's
        copy stream, after the stream their writes are queued on: the array's
        own (``__cuda_array_interface__`` v3 ``stream``), else ``stream``
        (a CUstream handle, or a pycuda/CuPy/torch stream object), and that
        stream then waits on the GPU for the copy before it can overwrite the
        array.  With no stream known (pycuda's arrays say ``stream: None``:
        their data is ready), the put waits on the host until the copy has
        read the array, so the caller may reuse it at once.  The dtype must
        be the component's (device arrays are not cast) and the array must be
        on the queue's GPU.  A variable-length component takes a padded
        device array with host ``lengths`` (or ``Padded(array, lengths)``);
        past each row's length it crosses as it is, not padded.

        A variable-length component takes a list of per-row arrays of their
        own lengths; or a padded array, every row full unless ``lengths``
        maps the component's name to its row lengths (or the value is a
        :class:`~theano_queue.Padded`).  Only each element's own extent
        crosses into the slot, padded with the component's ``pad_value``.
        """
        return self._put(element, timeout, lengths=lengths, stream=stream)

    def _put(self, element, timeout, stop=None, lengths=None, stream=None):
        """put(), and a wait that ``stop`` (an ``_engine.Stop``) ends with Stopped."""
        plain = stream is None and lengths is None and not self._layout.varying
        if plain and _all_arrays(element, len(self.components)):
            return self._ring.put(element, timeout, stop)  # the engine checks dtypes and shapes
        values = element_in_order(self.components, self._element(element), self.name)
        if any(_device.is_device_array(v.data if isinstance(v, Padded) else v) for v in values):
            return self._put_from_device(values, timeout, stop, stream, lengths)
        if stream is not None:
            raise ValueError("Queue.put: queue %r: stream is for device arrays; these are host data" % self.name)
        if not self._layout.varying:
            if lengths is not None:
                self._layout.refuse_lengths(self.name, "put")
            arrays = [as_component_value(c, v, self.name) for c, v in zip(self.components, values)]
            return self._ring.put(arrays, timeout, stop)
        write = self._layout.prepare(self._layout.with_lengths(values, lengths, self.name), self.name)
        # Packed straight into the slot's staging: the only copy on the host.
        slot, views = self._ring.reserve(timeout, stop)
        try:
            rows = write(views)
        except BaseException:
            self._ring.abort(slot)
            raise
        return self._ring.commit(slot, rows)

    def _put_from_device(self, values, timeout, stop, stream, lengths):
        on_device = [_device.is_device_array(v.data if isinstance(v, Padded) else v) for v in values]
        if not all(on_device):
            host = [c.name for c, d in zip(self.components, on_device) if not d]
            raise TypeError(
                "Queue.put: queue %r: an element is put from device memory or from host memory, not both; "
                "components %s are host data" % (self.name, ", ".join(map(repr, host)))
            )
        if not self.on_gpu:
            raise QueueError("Queue.put: queue %r lives in host memory; put device arrays into a GPU queue, or copy "
                             "them to the host first" % self.name)
        upload = None
        if self._layout.varying:
            from theano.gpuarray.type import get_context

            values = self._layout.with_lengths(values, lengths, self.name)
            upload = _device.uploader(get_context(self._target.context_name))
        elif lengths is not None:
            self._layout.refuse_lengths(self.name, "put")
        return _device.put(self._ring, self._layout, values, self.name, timeout, stop, stream, upload)

    def get(self, timeout=None, lengths=False, device=False):
        """Take the next element: a tuple of numpy arrays, one per component.

        For inspection and for code outside Theano graphs; graphs use
        :meth:`dequeue`.  ``timeout=None`` uses the queue's timeout.  A
        variable-length component comes padded to the element's extent;
        ``lengths=True`` appends the row lengths, as :meth:`dequeue` does.

        With ``device=True`` (GPU queues) the element stays on the GPU: a
        tuple of :class:`~theano_queue.device.DeviceArray`, each a pygpu
        ``GpuArray`` in the queue's context (``.gpuarray``) that exposes
        ``__cuda_array_interface__`` v3, so that CuPy, Numba, pycuda or torch
        read it without a trip through the host.
        """
        if device:
            if not self.on_gpu:
                raise QueueError("Queue.get: queue %r lives in host memory; device=True is for GPU queues" % self.name)
            if self._layout.varying:
                raise QueueError("Queue.get: queue %r has variable-length components; device=True is for queues "
                                 "whose axes are all fixed" % self.name)
            from theano.gpuarray.type import get_context

            return _device.get(self._ring, self.components, get_context(self._target.context_name), timeout)
        if lengths:
            self._layout.refuse_lengths(self.name, "get")
        return self._layout.unpack(self._ring.get(timeout), lengths)

    def writer(self, timeout=None):
        """Fill the next free slot in place: no copy between your arrays and the queue.

        ::

            with q.writer() as slot:
                load_images_into(slot["x"])       # writable views of full shape
                slot["y"][:] = labels
                slot.rows = n                     # optional: a partial batch

        For a GPU queue the views are the slot's pinned staging, so what you
        write there goes straight over the bus.  A variable-length
        component's view has its bounds' shape, e.g. ``(64, 512)``; write
        each row's start and its length into ``slot.lengths["tokens"]``
        (every row starts full); the element is packed to its longest row
        when the block ends.  The element is put when the
        block ends; if the block raises, the slot is given back and nothing is
        put.  The views become read-only once the block ends.  ``timeout`` is
        the wait for a free slot, as for :meth:`put`.
        """
        return self._writer(timeout)

    @contextlib.contextmanager
    def _writer(self, timeout, stop=None):
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

    def register_host(self, array):
        """Page-lock ``array`` so that puts of it (or of contiguous slices of it) skip the staging copy.

        Pays for a large dataset kept in host memory and fed in slices: each
        put then goes over the bus straight from ``array``.  Do not write
        into ``array`` while the queue may still copy from it; undo with
        :meth:`unregister_host`, which waits for those copies.  Memory this
        process already page-locked (``register_host`` on another queue, a
        Feeder whose GPU copies the array's rows) is used as it is, and stays
        locked until its last user lets go.  GPU queues only.
        """
        self._ring.register_host(array)

    def unregister_host(self, array):
        """Undo :meth:`register_host` once no copy from ``array`` is in flight."""
        self._ring.unregister_host(array)

    def trace(self, path=None, steps=100):
        """A timeline of the next ``steps`` elements, written to ``path`` as Chrome trace-event JSON.

        ::

            with q.trace("queue.json", steps=50):
                for _ in range(60):
                    train_step()

        Returns a :class:`~theano_queue.trace.Trace`; recording runs while its
        ``with`` block does, and stops by itself after ``steps`` elements.  Open
        the file in https://ui.perfetto.dev or chrome://tracing.
        """
        from .trace import Trace

        return Trace(self, path, steps)

    @staticmethod
    def _element(args):
        """The arguments of put/enqueue as one element.

        ``(x, y)``, ``((x, y),)`` and ``({"x": x, "y": y},)`` all name one element.
        """
        if isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], (tuple, list, Mapping)):
            return args[0]
        return args

    def close(self, cancel_pending=False):
        """No more puts.  Consumers take what is left, then get QueueClosed.

        With ``cancel_pending=True`` what is left is dropped and consumers get
        QueueClosed at once.
        """
        self._ring.close(cancel_pending)

    def fail(self, exc):
        """Mark the queue failed by ``exc``: consumers get FeederError (``__cause__`` exc) once drained."""
        self._ring.fail(exc)

    def reopen(self):
        """Open a closed (or failed) queue again, for the next epoch.  It must be drained."""
        self._ring.reopen()

    @property
    def closed(self):
        """True once closed or failed (until :meth:`reopen`)."""
        return self._ring.closed

    @property
    def target(self):
        """Where the ring lives: "cpu", "gpu" (Theano's default GPU) or a GPU context name."""
        return self._target.label

    on_gpu = property(lambda self: self._target.on_gpu, doc="True when the slots live on a GPU.")
    capacity = property(lambda self: self._ring.capacity, doc="The number of slots: elements the queue holds at most.")

    @property
    def timeout(self):
        """Seconds a wait lasts (dequeue, enqueue, and put/get/writer given no timeout); None for no limit."""
        return self._ring.timeout

    @timeout.setter
    def timeout(self, value):
        self._ring.timeout = value

    def size(self):
        """Elements ready to be dequeued now."""
        return self._ring.size()

    def stats(self):
        """Counters since creation, as a dict.

        ``enqueued``, ``dequeued``, ``dropped`` (cancelled by close, or lost to
        a failed copy), ``lent`` (dequeued by a CPU queue's Dequeue without a
        copy, see :ref:`cpu-hand-off`), ``bytes_in`` and ``bytes_out``, ``producer_wait_s`` (time producers
        waited for a free slot), ``consumer_wait_s`` (time consumers waited for
        data: the number that says the model waited for its input), ``size``,
        ``capacity``, ``state`` and ``backend``; ``fill_integral``, the
        integral of ``size`` over time in element-seconds, up to ``clock_s``,
        the ``time.monotonic()`` time of the snapshot: the mean fill between
        two snapshots ``a`` and ``b`` is ``(b["fill_integral"] -
        a["fill_integral"]) / (b["clock_s"] - a["clock_s"])``.
        """
        return self._ring.stats()


def _all_arrays(element, n):
    """True for a tuple of n numpy arrays: already what the engine takes (it checks dtypes and shapes).

    The common element of a Feeder's source, spared element_arrays' Python
    work per batch: the feeder's thread holds the GIL for less time.
    """
    return type(element) is tuple and len(element) == n and all(type(v) is np.ndarray for v in element)


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

    def rows_per_component(self):
        if self.rows is None:
            return [c.shape[0] if c.shape else 1 for c in self.components]
        return [self.rows if c.shape else 1 for c in self.components]

    def engine_rows(self, queue_name):
        """Rows per engine component, packing variable-length components to their longest row first."""
        rows = self.rows_per_component()
        if self.layout is None or not self.layout.varying:
            return rows
        return self.layout.finish(self.engine_views, rows, queue_name)

    def seal(self):
        for view in list(self.arrays) + list(self.engine_views):
            view.flags.writeable = False
