"""Dequeue and Enqueue for PyTensor, and its graph front end.

One engine, two front ends: these Ops run the same C code as Theano's
(``c_code/ops/dequeue.c``, ``c_code/ops/enqueue.c``) under PyTensor's C linker, and
their ``perform`` (in Numba's object mode) under the Numba linker (PyTensor
3.0's default; where Numba is not installed, the C linker alone).

The token is a 0-d int64 shared variable holding the queue's key in
:mod:`theano_queue.graph.base`'s registry: under Numba a graph is one jitted
function whose shared variables are arguments, and a key is an argument
every backend can type.  Every node gets a token of its own, so PyTensor
never merges two dequeues, and :class:`QueueOrder` runs one queue's nodes in
the order they were made.  What this front end shares with Theano's is in
:mod:`theano_queue.graph.base`; PyTensor's own ``ExternalCOp`` reads the
``#section`` parts of the C files.
"""

import importlib.util
import os
import sys
from typing import ClassVar

import numpy as np
from pytensor import shared, tensor
from pytensor.compile import optdb
from pytensor.gradient import disconnected_type
from pytensor.graph.basic import Apply
from pytensor.graph.features import Feature
from pytensor.graph.rewriting.basic import GraphRewriter
from pytensor.link.c.op import ExternalCOp
from pytensor.raise_op import Assert
from pytensor.tensor.type import TensorType

from ..core.errors import QueueClosed
from . import base as _graph
from .base import AttachesQueueOrder, QueueOpBase, queue_orderings


def make_token(queue, sequence):
    """A new token for one node of ``queue``'s; ``sequence`` orders the nodes."""
    # queue._key, the one private name read across modules on purpose (twice): the key this front end's own
    # Queue subclass registered its ring under (theano_queue/pytensor/queue.py); no user should see it.
    token = shared(np.asarray(queue._key, dtype="int64"), name="%s.token%d" % (queue.name, sequence))
    token.tag.queue_sequence = (queue._key, sequence)
    return token


class QueueCOp(QueueOpBase, ExternalCOp):
    """PyTensor's Dequeue and Enqueue: the shared part (graph/base.py) on PyTensor's ExternalCOp.

    ``key_token.c`` comes first: the token lookup both Ops' C calls (guarded,
    as a function with both Ops holds it twice).
    """

    c_needs = ("key_token.c",)
    ring_by_key = True
    # Restated: PyTensor's metaclass makes __eq__, __hash__ and (unless the class has one) __str__ from a class's
    # own __props__.
    __props__ = QueueOpBase.__props__
    __str__ = QueueOpBase.__str__

    def __init__(self, components, queue_name):
        QueueOpBase.__init__(self, components, queue_name)
        ExternalCOp.__init__(self, self.c_files())

    def ring(self, token):
        return _graph.lookup(token, str(self))


# Libraries that compile and run functions for their user: the outermost of their frames is the user's call.
CALLERS = ("pymc", "pymc3")
# What runs between a user's call and a Dequeue: never the call itself.
PLUMBING = ("pytensor", "theano", "theano_queue", "numba", "importlib")


def reaching_call():
    """``(frame, name)`` of the call that is running a function now: ``pm.fit`` or ``Model.point_logps`` (the
    outermost frame of a library in CALLERS), else the first line outside the plumbing (``train.py:30``)."""
    frame, library, caller = sys._getframe(1), None, None
    while frame is not None:
        top = frame.f_globals.get("__name__", "").split(".")[0]
        if top in CALLERS:
            library = frame
        elif caller is None and top not in PLUMBING:
            caller = frame
        frame = frame.f_back
    if library is not None:
        name = library.f_code.co_qualname.replace(".<locals>", "")
        exported = "." not in name and getattr(sys.modules.get(library.f_globals["__name__"].split(".")[0]), name, None)
        return library, ("pm." + name if exported else name)
    if caller is not None:
        return caller, "%s:%d" % (os.path.basename(caller.f_code.co_filename), caller.f_lineno)
    return None, "an unknown caller"


def name_the_call(exc):
    """Adds to a Dequeue's QueueClosed which call reached the queue whose run has ended (the C code calls it)."""
    if isinstance(exc, QueueClosed) and exc.args and isinstance(exc.args[0], str):
        exc.args = ("%s (reached by %s)" % (exc.args[0], reaching_call()[1]),) + exc.args[1:]


class Dequeue(QueueCOp):
    """Takes the next element of a queue: one output per component.

    On the C linker the outputs are the element's own memory, lent to the
    graph (the queue reuses it once no array over it is left); ``perform``
    takes it the same way.  Blocks (without the GIL) until an element is
    there; raises QueueClosed once the queue is closed and drained,
    QueueTimeout after the queue's timeout, FeederError when the feeder's
    source failed.
    """

    c_file = "dequeue.c"

    # Called with the node when a function that holds it is linked, before it can run: a check that refuses a
    # caller (theano_queue.clients.pymc's, for PyMC's calls outside a fit) does so before a batch is taken.
    link_checks: ClassVar[list] = []

    def make_node(self, token):
        # No axis is broadcastable unless its component says so (Component.broadcastable).
        outputs = [TensorType(c.dtype, shape=[1 if b else None for b in c.broadcastable])() for c in self.components]
        return Apply(self, [token], outputs)

    def prepare_node(self, node, storage_map, compute_map, impl):
        super().prepare_node(node, storage_map, compute_map, impl)
        for check in self.link_checks:
            check(node)

    def perform(self, node, inputs, outputs):
        try:
            element = self.ring(inputs[0]).take()
        except QueueClosed as exc:
            name_the_call(exc)
            raise
        for storage, array in zip(outputs, element):
            storage[0] = array

    # The outputs are data, not a function of the token: no gradient flows
    # through the Op, and saying so lets pytensor.grad (PyMC's pm.fit with
    # obj_n_mc > 1, say) walk past it instead of raising NotImplementedError.
    def connection_pattern(self, node):
        return [[False] * len(node.outputs)]

    def grad(self, inputs, output_grads):
        return [disconnected_type()]

    c_code = QueueOpBase.dequeue_c
    # The C names the call that reached a queue whose run has ended: this module's name_the_call.
    call_namer = __name__


class Enqueue(QueueCOp):
    """Puts its inputs into a queue as one element; outputs the queue's size afterwards."""

    c_file = "enqueue.c"

    def make_node(self, token, *values):
        checked = _graph.enqueue_inputs(self, self.components, values, tensor.as_tensor_variable)
        return Apply(self, [token, *checked], [tensor.lscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(self.ring(inputs[0]).put(inputs[1:], op=type(self).__name__), dtype="int64")

    c_code = QueueOpBase.enqueue_c


# ---- Numba: perform in object mode -----------------------------------------------------


def register_numba():
    """Gives the Ops their Numba version; only where Numba is installed (PyMC 5 does not require it)."""
    import numba
    from pytensor.link.numba.dispatch import numba_funcify
    from pytensor.link.numba.dispatch.basic import get_numba_type, numba_njit

    @numba_funcify.register(Dequeue)
    @numba_funcify.register(Enqueue)
    def numba_funcify_queue_op(op, node, **kwargs):
        """The node's ``perform`` called from the jitted graph in object mode (about 2 us a call).

        PyTensor's own fallback does the same but warns at every compile; a
        queue's Ops are meant to run this way until the engine's C API is
        called from Numba directly.
        """
        for check in getattr(op, "link_checks", ()):  # the C linker's prepare_node does the same
            check(node)
        types = [get_numba_type(o.type) for o in node.outputs]
        ret_sig = types[0] if len(types) == 1 else numba.types.Tuple(types)
        single = len(types) == 1

        def py_perform(inputs):
            storage = [[None] for _ in node.outputs]
            op.perform(node, list(inputs), storage)
            return storage[0][0] if single else tuple(s[0] for s in storage)

        @numba_njit
        def queue_op(*inputs):
            with numba.objmode(ret=ret_sig):
                ret = py_perform(inputs)
            return ret

        return queue_op


if importlib.util.find_spec("numba") is not None:
    register_numba()


# ---- ordering ----------------------------------------------------------------------


class QueueOrder(Feature):
    """Runs the nodes of one queue in the order they were made (graph/base.py's queue_orderings)."""

    def orderings(self, fgraph):
        return queue_orderings(fgraph)


class AttachQueueOrder(AttachesQueueOrder, GraphRewriter):
    """Attaches :class:`QueueOrder` to every function graph that uses a queue."""

    feature = QueueOrder


optdb.register("theano_queue_order", AttachQueueOrder(), "fast_run", "fast_compile", "theano_queue", position=0.01)


# ---- the front end ----------------------------------------------------------------


class PyTensorGraph(_graph.GraphFrontEnd):
    """PyTensor's graph front end: Dequeue and Enqueue nodes, each with its own key token."""

    name = "PyTensor"
    tensor = tensor
    Assert = Assert

    def dequeue(self, queue, sequence):
        return Dequeue(queue.port.layout.engine, queue.name).make_node(make_token(queue, sequence)).outputs

    def enqueue(self, queue, sequence, inputs):
        return Enqueue(queue.port.layout.engine, queue.name)(make_token(queue, sequence), *inputs)


PYTENSOR = PyTensorGraph()

__all__ = ["Dequeue", "Enqueue", "QueueOrder", "PYTENSOR"]
