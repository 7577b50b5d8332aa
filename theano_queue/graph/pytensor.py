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
the order they were made.
"""

import hashlib
import importlib.util
import re
from typing import ClassVar

import numpy as np
from pytensor import shared, tensor
from pytensor.compile import optdb
from pytensor.gradient import disconnected_type
from pytensor.graph.basic import Apply
from pytensor.graph.features import Feature
from pytensor.graph.rewriting.basic import GraphRewriter
from pytensor.link.c.op import COp
from pytensor.raise_op import Assert
from pytensor.tensor.type import TensorType

from ..core.paths import header_dirs, header_file, op_file
from . import base as _graph

QUEUE_HEADERS = ("tq_base.h", "tq_capi.h")
KEY_FILE = "key_token.c"


def c_sections(filename):
    """The ``#section`` parts of one of the Ops' C files, by section name (as Theano's file-based COp reads them)."""
    with open(op_file(filename)) as f:
        text = f.read()
    sections = {}
    for name, body in re.findall(r"^#section (\w+)\n(.*?)(?=^#section |\Z)", text, flags=re.M | re.S):
        sections[name] = sections.get(name, "") + body
    return sections


def make_token(queue, sequence):
    """A new token for one node of ``queue``'s; ``sequence`` orders the nodes."""
    # queue._key, the one private name read across modules on purpose (twice): the key this front end's own
    # Queue subclass registered its ring under (theano_queue/pytensor/queue.py); no user should see it.
    token = shared(np.asarray(queue._key, dtype="int64"), name="%s.token%d" % (queue.name, sequence))
    token.tag.queue_sequence = (queue._key, sequence)
    return token


class QueueCOp(COp):
    """What Dequeue and Enqueue share: their C file, the engine's header, the token."""

    c_file: ClassVar[str]  # the Op's C file in c_code/ops/, set by each subclass

    # The queue's name is for messages only: it must not split the compile
    # cache, so it is not a prop and the C code does not see it.
    __props__ = ("components",)

    def __init__(self, components, queue_name):
        self.components = tuple(components)
        self.queue_name = queue_name

    def __str__(self):
        return "%s{%s}" % (type(self).__name__, self.queue_name)

    def do_constant_folding(self, fgraph, node):
        # Folding would run the Op once at compile time and freeze its result.
        return False

    def c_header_dirs(self, **kwargs):
        return header_dirs()

    def c_headers(self, **kwargs):
        return list(QUEUE_HEADERS)

    def c_support_code(self, **kwargs):
        # Two entries: a function with both Ops shares the key lookup once.
        return [c_sections(KEY_FILE)["support_code"], c_sections(self.c_file)["support_code"]]

    def c_init_code(self, **kwargs):
        return [c_sections(self.c_file)["init_code"]]

    def c_code_cache_version(self):
        digest = hashlib.sha256()
        paths = [header_file(name) for name in QUEUE_HEADERS] + [op_file(KEY_FILE), op_file(self.c_file)]
        for path in paths:
            with open(path, "rb") as f:
                digest.update(f.read())
        return (1, digest.hexdigest())

    def ring(self, token):
        return _graph.lookup(token, str(self))


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

    def make_node(self, token):
        # No axis is broadcastable unless its component says so (Component.broadcastable).
        outputs = [TensorType(c.dtype, shape=[1 if b else None for b in c.broadcastable])() for c in self.components]
        return Apply(self, [token], outputs)

    def perform(self, node, inputs, outputs):
        for storage, array in zip(outputs, self.ring(inputs[0]).take()):
            storage[0] = array

    # The outputs are data, not a function of the token: no gradient flows
    # through the Op, and saying so lets pytensor.grad (PyMC's pm.fit with
    # obj_n_mc > 1, say) walk past it instead of raising NotImplementedError.
    def connection_pattern(self, node):
        return [[False] * len(node.outputs)]

    def grad(self, inputs, output_grads):
        return [disconnected_type()]

    def c_code(self, node, name, inputs, outputs, sub):
        return """{
    PyObject *tq_ring = tq_ring_by_key("%(who)s", %(token)s);
    PyArrayObject **tq_outputs[] = {%(outs)s};
    const int tq_typenums[] = {%(typenums)s};
    int tq_rc = tq_ring ? tq_dequeue_into("%(who)s", tq_ring, tq_outputs, tq_typenums, %(n)d) : -1;
    Py_XDECREF(tq_ring);
    if (tq_rc != 0) {
        %(fail)s
    }
}""" % dict(
            outs=", ".join("&" + o for o in outputs),
            typenums=", ".join(o.type.dtype_specs()[2] for o in node.outputs),
            who=type(self).__name__,
            token=inputs[0],
            n=len(outputs),
            fail=sub["fail"],
        )


class Enqueue(QueueCOp):
    """Puts its inputs into a queue as one element; outputs the queue's size afterwards."""

    c_file = "enqueue.c"

    def make_node(self, token, *values):
        checked = _graph.enqueue_inputs(self, self.components, values, tensor.as_tensor_variable)
        return Apply(self, [token, *checked], [tensor.lscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(self.ring(inputs[0]).put(inputs[1:], op=type(self).__name__), dtype="int64")

    def c_code(self, node, name, inputs, outputs, sub):
        return """{
    PyObject *tq_ring = tq_ring_by_key("%(who)s", %(token)s);
    PyArrayObject *tq_inputs[] = {%(ins)s};
    int tq_rc = tq_ring ? tq_enqueue_from("%(who)s", tq_ring, tq_inputs, %(n)d, &%(out)s) : -1;
    Py_XDECREF(tq_ring);
    if (tq_rc != 0) {
        %(fail)s
    }
}""" % dict(
            ins=", ".join(inputs[1:]),
            who=type(self).__name__,
            token=inputs[0],
            n=len(inputs) - 1,
            out=outputs[0],
            fail=sub["fail"],
        )


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


def is_queue_node(node):
    token = node.inputs[0] if node.inputs else None
    return token is not None and hasattr(token.tag, "queue_sequence")


class QueueOrder(Feature):
    """Runs the nodes of one queue in the order they were made.

    Two dequeues in one function are independent to PyTensor; this makes the
    first ``q.dequeue()`` take the first element.  Data dependencies always
    point from older nodes to newer ones, so the order never makes a cycle.
    """

    def orderings(self, fgraph):
        by_queue = {}
        for node in fgraph.apply_nodes:
            if is_queue_node(node):
                queue, sequence = node.inputs[0].tag.queue_sequence
                by_queue.setdefault(queue, []).append((sequence, node))
        order = {}
        for nodes in by_queue.values():
            nodes.sort(key=lambda pair: pair[0])
            for (_, before), (_, after) in zip(nodes, nodes[1:]):
                order[after] = [before]
        return order


class AttachQueueOrder(GraphRewriter):
    """Attaches :class:`QueueOrder` to every function graph that uses a queue."""

    def add_requirements(self, fgraph):
        pass

    def apply(self, fgraph):
        if any(isinstance(f, QueueOrder) for f in fgraph._features):
            return
        if any(is_queue_node(node) for node in fgraph.apply_nodes):
            fgraph.attach_feature(QueueOrder())


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
