"""Queue: a bounded FIFO of batches that compiled Theano graphs dequeue from."""

import itertools

from ..graph.base import unpicklable_message
from ..tools import stall as _stall
from . import device_arrays as _device
from . import target as _target
from .errors import QueueError
from .layout import Layout
from .port import Port, SlotWriter, element_of  # noqa: F401  (SlotWriter: documented here)
from .spec import check_queue_name, element_in_order, parse_components

_names = itertools.count()


def default_queue_name():
    """The name of a queue made without one: queue0, queue1, ... (one count for every front end's queues)."""
    return "queue%d" % next(_names)


def static_shapes(components, lengths=False):
    """The shapes a dequeue's variables are known to have, in the order it gives them: ``None`` on an axis
    whose extent varies from element to element (the batch axis, variable-length axes)."""

    def known(c):
        return tuple(None if i == 0 or i in c.variable_axes else int(n) for i, n in enumerate(c.shape))

    shapes = [known(c) for c in components]
    if lengths:  # one int64 length per row: (n,), or (n, k) for k variable axes
        shapes += [
            (None,) + ((len(c.variable_axes),) if len(c.variable_axes) > 1 else ())
            for c in components
            if c.variable_axes
        ]
    return shapes


def output_names(components, lengths=False):
    """The names of a dequeue's variables, in the order it gives them: each component's, then
    ``<name>_lengths`` for each variable-length one's row lengths."""
    names = [c.name for c in components]
    if lengths:
        names += [c.name + "_lengths" for c in components if c.variable_axes]
    return names


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
        last batch) and the dequeued variable then has that length; every
        component of an element has the same length there, but one whose
        leading axis is its own, declared ``(tq.own(10), ...)``, and a
        scalar one.  The other axes are fixed, but for those marked
        :class:`~theano_queue.upto` (variable length, e.g. ``(64,
        tq.upto(512))``): each element is padded to its own longest row
        there, and carries each row's length.
    capacity : int or ``"auto"``
        Elements the queue holds at most (1 to 4096); producers wait when it
        is full.  The ring must fit in host memory (and, on a GPU, in free
        device memory): a queue that cannot is refused here.  ``"auto"``, as
        tf.data's ``prefetch(AUTOTUNE)``: the queue allocates as many slots
        as ``memory_budget`` holds (2 to 16; on a GPU, at most a quarter of
        the free device memory) and a thread of its own sets how many are
        used, growing while producers outrun the model in bursts and
        shrinking while the ring is always full, never below a slot per
        worker process and two more; the copy pool's threads
        follow an array dataset's gather time.  No element is moved or
        reordered by a change; ``feeder.stats()["auto"]`` and the monitor's
        line say what was decided and why (theano_queue/feed/tune_capacity.py).
    memory_budget : int or None
        With ``capacity="auto"``: the bytes the ring's slots may take (by
        default an eighth of the machine's memory, at most 1 GiB).
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

    def __init__(
        self,
        components,
        capacity=2,
        target=None,
        timeout=None,
        name=None,
        pad_value=None,
        broadcastable=None,
        *,
        memory_budget=None,
    ):
        self.name = check_queue_name(name) if name is not None else default_queue_name()
        self.components = parse_components(components, self.name, pad_value, broadcastable)
        # The engine holds variable-length components as fixed ones (theano_queue/core/layout.py).
        self._layout = Layout(self.components)
        auto = isinstance(capacity, str) and capacity == "auto"
        where = _target.resolve(target, self.name)
        if auto:
            capacity = _target.auto_slots(where, self._layout.engine, memory_budget, self.name)
        elif memory_budget is not None:
            raise ValueError('Queue %r: memory_budget is for capacity="auto", got capacity=%r' % (self.name, capacity))
        capacity = _target.check_capacity(capacity, self.name)
        self._ring = _target.make_ring(where, self.name, self._layout.engine, capacity, timeout)
        _stall.watch(self, self._ring)  # a dequeue that waits long says so (theano_queue/tools/stall.py)
        self._tokens = itertools.count()
        # What producers hold: the ring, the put/writer core and the run, not the Queue (theano_queue/core/port.py).
        self._port = Port(self.name, self.components, self._layout, where, self._ring)
        # Queue(capacity="auto"): the thread that tunes the ring's depth (theano_queue/feed/tune_capacity.py).
        self._auto = None
        if auto:
            from ..feed.tune_capacity import AUTO_START_DEPTH, AutoCapacity

            self._ring.depth = min(AUTO_START_DEPTH, capacity)
            self._auto = AutoCapacity(self._port, capacity).start()

    @property
    def port(self):
        """What Feeders and the graph front ends hold of this queue (:class:`~theano_queue.core.port.Port`): its ring,
        layout and target, the put and writer core, and :attr:`~theano_queue.core.port.Port.run`, the one owner of
        its run (theano_queue/core/run.py).  Not needed to use a queue."""
        return self._port

    @property
    def feeders(self):
        """The Feeders attached now: started, and neither done nor left by their ``with`` block."""
        return [f for f in (m.owner() for m in self._port.run.attached()) if f is not None]

    @property
    def _target(self):
        """Where the ring lives (a :class:`~theano_queue.core.target.Target`), kept by the port producers hold."""
        return self._port.target

    def _pretend_target(self, target):
        """The one test seam for GPU-only Python paths (tests/support/pretend.py): the queue and its port report
        ``target`` while the ring stays where it is, so the Feeder's gather choice and held producers can be
        exercised on a host ring without a GPU.  Not for users: puts and gets still go to the real ring."""
        self._port.pretend_target(target)

    def __del__(self):
        # The last user reference is gone, but a thread may still be blocked in
        # a function that dequeues from the ring (it holds the ring, not the
        # Queue): closing wakes it with QueueClosed instead of leaving it there.
        auto = getattr(self, "_auto", None)
        if auto is not None:
            auto.stop()
        ring = getattr(self, "_ring", None)
        if ring is not None:
            try:
                ring.close()
            except QueueError:
                pass  # inherited by a forked child, which must leave the parent's ring alone

    def __reduce_ex__(self, protocol):
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

        Each variable is named after its component (``tokens_lengths`` for
        row lengths), so that Theano's and Keras's messages name it.  Its
        ``_keras_shape`` is its static shape, ``None`` where
        an element's extent varies (the batch axis, variable-length axes):
        what Keras's ``Input(tensor=x)`` reads (doc/keras.rst).
        """
        if lengths:
            self._layout.refuse_lengths(self.name, "dequeue")
        graph = self._graph()
        # One node for the whole element: a function that uses any of its outputs takes one element.
        engine = graph.dequeue(self, next(self._tokens))
        outputs = self._layout.graph_outputs(engine, lengths, graph)
        for variable, shape, name in zip(
            outputs, static_shapes(self.components, lengths), output_names(self.components, lengths)
        ):
            # Keras's Theano backend reads a tensor's shape from this attribute alone: Input(tensor=x) needs it.
            variable._keras_shape = shape
            # Named after its component, so that messages about the graph (Theano's, Keras's) name it.
            variable.name = name
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
        element = self._element(variables)
        if type(element) is tuple and len(element) == 1 and len(self.components) > 1:
            element = element[0]  # q.enqueue(x) on a queue of more: "a bare variable", as put says "a bare array"
        element = element_in_order(self.components, element, self.name)
        if not self._layout.varying and lengths is not None:
            self._layout.refuse_lengths(self.name, "enqueue")
        graph = self._graph()
        element = self._layout.graph_inputs(element, lengths, self.name, graph)
        return graph.enqueue(self, next(self._tokens), element)

    @staticmethod
    def _graph():
        """The graph front end whose variables dequeue() and enqueue() give (theano_queue.graph.base): Theano's.

        Imported at the first dequeue or enqueue, so that the rest of the
        queue runs where Theano is not installed.
        """
        from ..graph.theano import THEANO

        return THEANO

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
        return self._port.put(element, timeout, None, lengths, stream)  # _put's, without its call

    def _put(self, element, timeout, stop=None, lengths=None, stream=None):
        """put(), and a wait that ``stop`` (an ``_engine.Stop``) ends with Stopped."""
        return self._port.put(element, timeout, stop, lengths, stream)

    def get(self, timeout=None, lengths=False, device=False):
        """Take the next element: a tuple of numpy arrays, one per component.

        For inspection and for code outside Theano graphs; graphs use
        :meth:`dequeue`.  ``timeout=None`` uses the queue's timeout.  A
        variable-length component comes padded to the element's extent;
        ``lengths=True`` appends the row lengths, as :meth:`dequeue` does.

        With ``device=True`` (GPU queues) the element stays on the GPU: a
        tuple of :class:`~theano_queue.core.device_arrays.DeviceArray`, each a pygpu
        ``GpuArray`` in the queue's context (``.gpuarray``) that exposes
        ``__cuda_array_interface__`` v3, so that CuPy, Numba, pycuda or torch
        read it without a trip through the host.
        """
        if device:
            if not self.on_gpu:
                raise QueueError("Queue.get: queue %r lives in host memory; device=True is for GPU queues" % self.name)
            if self._layout.varying:
                raise QueueError(
                    "Queue.get: queue %r has variable-length components; device=True is for queues "
                    "whose axes are all fixed" % self.name
                )
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

    def _writer(self, timeout, stop=None):
        """writer(), and a wait that ``stop`` (an ``_engine.Stop``) ends with Stopped."""
        return self._port.writer(timeout, stop)

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

        Returns a :class:`~theano_queue.tools.trace.Trace`; recording runs while its
        ``with`` block does, and stops by itself after ``steps`` elements.  Open
        the file in https://ui.perfetto.dev or chrome://tracing.
        """
        from ..tools.trace import Trace

        return Trace(self, path, steps)

    _element = staticmethod(element_of)

    def close(self, cancel_pending=False):
        """No more puts.  Consumers take what is left, then get QueueClosed.

        With ``cancel_pending=True`` what is left is dropped and consumers get
        QueueClosed at once.  Either way the epoch is over: a Feeder started
        afterwards waits for :meth:`reopen`.
        """
        self._port.run.close(cancel_pending)

    def fail(self, exc):
        """Mark the queue failed by ``exc``: consumers get FeederError (``__cause__`` exc) once drained."""
        self._ring.fail(exc)

    def reopen(self):
        """Start the next epoch: open the queue again, with nothing of the last one in it.

        * Feeders still running (the epoch's consumer stopped early, or
          ``q.close(cancel_pending=True)`` came first) are stopped and waited
          for, as starting a new DataLoader iterator ends the last one's
          workers, and what the queue holds is dropped: nothing they produced
          reaches the next epoch, and they can no longer close or fail the
          queue.  One that does not stop within its ``stop_timeout`` (a
          source blocked inside ``next()``) makes this raise QueueError; the
          queue then stays closed until a later ``reopen()``.
        * What is left after a Feeder's ``with`` block was left is dropped too.
        * Otherwise the queue must be drained: elements left by a Feeder that
          ran out, or put by hand into a closed queue, make this raise
          QueueError (``q.close(cancel_pending=True)`` drops them).

        An open queue no Feeder fed since the last reopen is left as it is.
        """
        self._port.run.reopen()

    @property
    def closed(self):
        """True once closed or failed (until :meth:`reopen`)."""
        return self._ring.closed

    @property
    def target(self):
        """Where the ring lives: "cpu", "gpu" (Theano's default GPU) or a GPU context name."""
        return self._target.label

    on_gpu = property(lambda self: self._target.on_gpu, doc="True when the slots live on a GPU.")
    capacity = property(
        lambda self: self._ring.depth,
        doc='Elements the queue holds at most: its slots, or with capacity="auto" the depth the tuner set now.',
    )

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
        ``capacity`` (elements it holds at most now: the depth a
        ``capacity="auto"`` queue's tuner set), ``slots`` (allocated), ``state`` and ``backend``; ``fill_integral``, the
        integral of ``size`` over time in element-seconds, up to ``clock_s``,
        the ``time.monotonic()`` time of the snapshot: the mean fill between
        two snapshots ``a`` and ``b`` is ``(b["fill_integral"] -
        a["fill_integral"]) / (b["clock_s"] - a["clock_s"])``.
        """
        return self._ring.stats()
