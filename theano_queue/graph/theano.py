"""Dequeue and Enqueue: the Theano Ops that take elements out of a queue and put them in.

Each node's first input is a *queue token*: a generic shared variable holding a
weak reference to the queue's ring.  Tokens keep the pitfalls away:

* the ring is not among the Op's props, so the compile cache can pickle its key,
  and every queue of the same components shares one compiled module;
* each ``q.dequeue()`` has its own token, so Theano never merges two dequeues;
* a queue deleted while a function still uses it is a clear error, not a crash.

Their C code is in ``c_code/ops/dequeue.c`` and ``c_code/ops/enqueue.c`` (the
Dequeue's thread guard in ``thread_guard.c``); ``perform`` does the same through
the engine's Python face for the Python linker.  What the PyTensor front end
shares with this one is in :mod:`theano_queue.graph.base`.
"""

import sys
import threading
import warnings
import weakref
from collections import OrderedDict

import numpy as np

try:
    import theano  # noqa: F401
except ImportError as exc:  # a PyTensor-only install (PyMC 5): say what each front end needs
    raise ImportError(
        "theano_queue.Queue's dequeue()/enqueue() build Theano graphs and need Theano 1.0.5: "
        "pip install 'theano_queue[theano]'; with PyTensor (PyMC 5) use theano_queue.pytensor.Queue"
    ) from exc
from theano import tensor
from theano.compile import optdb
from theano.compile.sharedvalue import SharedVariable
from theano.gof import Apply, COp, Optimizer, toolbox
from theano.gof.type import generic
from theano.gof.utils import scratchpad
from theano.gradient import DisconnectedType
from theano.tensor import TensorType, as_tensor_variable, lscalar
from theano.tensor.opt import Assert

from ..core.errors import SeveralDequeuesWarning
from .base import (
    SECOND_THREAD,
    AttachesQueueOrder,
    GraphFrontEnd,
    OneThreadAtATime,
    QueueOpBase,
    enqueue_inputs,
    is_queue_node,
    queue_orderings,
    ring_or_error,
    unpicklable_message,
)


class QueueRef(weakref.ref):
    """A token's value: a weak reference to the ring that copies as itself and refuses to pickle.

    A queue lives in this process's memory (and maybe a GPU's); a pickled
    function could only come back without it.
    """

    __slots__ = ("queue_name",)

    def __new__(cls, ring, queue_name):
        self = super().__new__(cls, ring)
        self.queue_name = queue_name
        return self

    def __init__(self, ring, queue_name):
        super().__init__(ring)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        raise TypeError(unpicklable_message(self.queue_name, " (nor can a compiled function that uses it)"))


def make_token(ring, queue_name, sequence, target):
    """A new token for one node of ``ring``'s queue; ``sequence`` orders the nodes."""
    token = SharedVariable(
        type=generic, value=QueueRef(ring, queue_name), name="%s.token%d" % (queue_name, sequence), strict=False
    )
    token.tag.queue_sequence = (id(ring), sequence)
    token.tag.queue_target = target
    if target.on_gpu:
        # Theano's GraphToGPU looks for a context among the function's inputs
        # and logs an error when none has one (device=cpu with contexts=...).
        token.tag.context_name = target.context_name
    return token


def resolve_token(token_value, who):
    return ring_or_error(token_value(), who)


def refuse_debug_mode(op, caller):
    if caller.f_globals.get("__name__") == "theano.compile.debugmode":
        from ..core.errors import QueueError

        raise QueueError(
            "%s: DebugMode cannot check a queue's Ops: it runs every node several times and compares the "
            "results, and each run would take another element.  Compile functions that dequeue or enqueue "
            "with another mode (FAST_RUN, FAST_COMPILE)" % op
        )


class QueueCOp(QueueOpBase, COp):
    """Theano's Dequeue and Enqueue: the shared part (graph/base.py) on Theano's file-based COp."""

    # Restated: Theano's metaclass makes __eq__, __hash__ and (unless the class has one) __str__ from a class's
    # own __props__.
    __props__ = QueueOpBase.__props__
    __str__ = QueueOpBase.__str__

    def __init__(self, components, queue_name):
        QueueOpBase.__init__(self, components, queue_name)
        COp.__init__(self, self.c_files())

    # DebugMode (alone) calls these two directly, to run each node through both
    # and compare: every run would take another element.  Refuse at compile
    # time, before anything is taken.
    def make_c_thunk(self, node, *args, **kwargs):
        refuse_debug_mode(self, sys._getframe(1))
        return super().make_c_thunk(node, *args, **kwargs)

    def make_py_thunk(self, node, *args, **kwargs):
        refuse_debug_mode(self, sys._getframe(1))
        return super().make_py_thunk(node, *args, **kwargs)

    def output_types(self):
        return [TensorType(c.dtype, c.broadcastable)() for c in self.components]


class DequeuedTag(scratchpad):
    """A dequeued variable's tag, whose ``test_value`` is zeros of its component's full shape, made when asked."""

    def __init__(self, shape, dtype):
        self.__dict__["tq_test_shape"] = (tuple(int(n) for n in shape), np.dtype(dtype))

    def __getattr__(self, name):
        if name != "test_value" or "tq_test_shape" not in self.__dict__:
            raise AttributeError(name)
        shape, dtype = self.__dict__["tq_test_shape"]
        value = self.__dict__["test_value"] = np.zeros(shape, dtype)
        return value


class DequeueApply(Apply):
    """A dequeue's node: cloned onto the same inputs, it is itself.

    ``theano.clone(cost, {w: w2})`` rebuilds every node between the cost and
    its leaves; a copy of the Dequeue would take an element of its own, so
    the clone would see another batch than the cost it was made from.
    PyMC3's ``fit(obj_n_mc > 1)`` clones its loss once per posterior sample
    inside a ``theano.scan``: with copies the Dequeue (and its token, which
    scan's gradient cannot zero) would move into the scan's loop and take
    one element per sample.  Kept as it is, the dequeued variables enter the
    scan from outside: one element a step, whatever the number of samples.
    New inputs (a function's own copy of the graph) still make a new node.
    """

    def clone_with_new_inputs(self, inputs, strict=True):
        if len(inputs) == len(self.inputs) and all(new is old for new, old in zip(inputs, self.inputs)):
            return self
        return super().clone_with_new_inputs(inputs, strict)


class Dequeue(OneThreadAtATime, QueueCOp):
    """Takes the next element of a queue: one output per component.

    On a host queue the outputs are the element's own memory, lent to the
    graph: the queue reuses it only once no array over it is left (see
    doc/design.rst, "The CPU hand-off").

    Blocks (without the GIL) until an element is there; raises QueueClosed
    once the queue is closed and drained, QueueTimeout after the queue's
    timeout, FeederError when the feeder's source failed.
    """

    c_file = "dequeue.c"

    def make_node(self, token):
        node = DequeueApply(self, [token], self.output_types())
        self.set_test_values(node)
        return node

    def set_test_values(self, node):
        """Zeros of each component's full shape as the outputs' test values (PyMC3 builds its model with them).

        Made when first asked (:class:`DequeuedTag`), so that they are there
        whenever ``compute_test_value`` is on, including for a dequeue made
        before it was turned on (PyMC3 turns it on inside its model), and cost
        nothing otherwise.  Theano would otherwise compute them by running
        the Op, which takes an element from the queue (or waits for one)
        while the graph is built.
        """
        for out, component in zip(node.outputs, self.components):
            out.tag = DequeuedTag(component.shape, component.dtype)

    def perform(self, node, inputs, outputs, params=None):
        if getattr(node.tag, "tq_caller", None) not in (None, threading.get_ident()):
            if not getattr(node.tag, "tq_warned", False):
                node.tag.tq_warned = True
                warnings.warn(SECOND_THREAD, RuntimeWarning, stacklevel=stacklevel_outside(("theano", "theano_queue")))
        node.tag.tq_caller = threading.get_ident()
        ring = resolve_token(inputs[0], str(self))
        for storage, array in zip(outputs, ring.take()):
            storage[0] = array

    # The outputs are data, not a function of the token: no gradient flows
    # through the Op, and saying so lets theano.grad (PyMC3's fit with
    # obj_n_mc > 1, say) walk past it instead of failing.
    def connection_pattern(self, node):
        return [[False] * len(node.outputs)]

    def grad(self, inputs, output_grads):
        return [DisconnectedType()()]

    c_code = QueueOpBase.dequeue_c


class Enqueue(QueueCOp):
    """Puts its inputs into a queue as one element; outputs the queue's size afterwards."""

    c_file = "enqueue.c"

    def make_node(self, token, *values):
        checked = enqueue_inputs(self, self.components, values, as_tensor_variable)
        return Apply(self, [token] + checked, [lscalar()])

    def perform(self, node, inputs, outputs, params=None):
        import numpy as np

        ring = resolve_token(inputs[0], str(self))
        outputs[0][0] = np.asarray(ring.put(inputs[1:], op=type(self).__name__), dtype="int64")

    c_code = QueueOpBase.enqueue_c


# ---- ordering ----------------------------------------------------------------------


class QueueOrder(toolbox.Feature):
    """Runs the nodes of one queue in the order they were made (graph/base.py's queue_orderings)."""

    def orderings(self, fgraph):
        return queue_orderings(fgraph)


class AttachQueueOrder(AttachesQueueOrder, Optimizer):
    """Attaches :class:`QueueOrder` to every function graph that uses a queue, and warns of several dequeues."""

    feature = QueueOrder

    def attached(self, fgraph):
        warn_several_dequeues(fgraph)


# The rings already warned about: once per queue is enough to be read.
_warned_rings: "weakref.WeakSet" = weakref.WeakSet()


def warn_several_dequeues(fgraph):
    """Warns, once per queue, where one function takes more than one element of a queue per call.

    It is what two ``q.dequeue()`` calls do (documented), and it is also the
    usual slip of ``x = q.dequeue()[0]`` and ``y = q.dequeue()[1]``: x of one
    batch trained against y of the next, with nothing to show it.
    """
    counts = OrderedDict()
    for node in fgraph.apply_nodes:
        if is_queue_node(node) and isinstance(node.op, Dequeue):
            ring = node.inputs[0].tag.queue_sequence[0]
            name, ref = node.op.queue_name, node.inputs[0].get_value(borrow=True)
            counts.setdefault(ring, [name, ref, 0])[2] += 1
    for name, ref, n in counts.values():
        ring = ref()
        if n < 2 or ring is None or ring in _warned_rings:
            continue
        _warned_rings.add(ring)
        warnings.warn(
            "a function takes %d elements of queue %r per call (it uses the variables of %d q.dequeue() calls): "
            "each call's variables are another batch's, so an x from one and a y from another are not each "
            "other's.  Take every component from one call (x, y = q.dequeue()); where taking %d batches a "
            "step is what you mean, ignore theano_queue.core.errors.%s"
            % (n, name, n, n, SeveralDequeuesWarning.__name__),
            SeveralDequeuesWarning,
            stacklevel=stacklevel_outside(("theano", "theano_queue")),
        )


def stacklevel_outside(packages):
    """The ``stacklevel`` of the first caller outside ``packages``, for a warning its author can find."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in packages:
        level, frame = level + 1, frame.f_back
    return level


optdb.register("theano_queue_order", AttachQueueOrder(), 0.01, "fast_run", "fast_compile", "theano_queue")


# ---- the front end ----------------------------------------------------------------


class TheanoGraph(GraphFrontEnd):
    """Theano's graph front end: Dequeue and Enqueue nodes, each with its own token.

    A fresh token per node keeps Theano from merging two dequeues, and the
    compiled code (which sees only a weak reference) is the same for every
    queue of the same components: compiled once, cached.
    """

    name = "Theano"
    tensor = tensor
    Assert = Assert

    def dequeue(self, queue, sequence):
        token = make_token(queue.port.ring, queue.name, sequence, queue.port.target)
        return Dequeue(queue.port.layout.engine, queue.name).make_node(token).outputs

    def enqueue(self, queue, sequence, inputs):
        token = make_token(queue.port.ring, queue.name, sequence, queue.port.target)
        return Enqueue(queue.port.layout.engine, queue.name)(token, *inputs)


THEANO = TheanoGraph()

__all__ = ["Dequeue", "Enqueue", "make_token", "QueueOrder", "THEANO"]
