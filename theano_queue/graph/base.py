"""What both graph front ends share: the interface a Queue asks of one, and all of the Ops that is not the library's.

A :class:`~theano_queue.Queue` is the engine's ring plus a *graph front end*:
what makes the library's dequeue and enqueue nodes, and the tensor functions
the variable-length layout reshapes and masks with.  Theano's front end is
``theano_queue.graph.theano.THEANO``, PyTensor's ``theano_queue.graph.pytensor.PYTENSOR``;
each is a thin layer over this module: the Ops' shared methods and cache
version (``QueueOpBase``), the Dequeues' thread guard
(``OneThreadAtATime``, C in ``c_code/ops/thread_guard.c``), the order of
one queue's nodes (``queue_orderings``, ``AttachesQueueOrder``) and
the token lookup's one message (``ring_or_error``).  This module imports
no graph library: the core (the ring, the feeding side, monitor, trace) runs
under either.
"""

import hashlib
import inspect
import itertools
import threading
import weakref
from collections import OrderedDict
from typing import Any, ClassVar, Dict, Tuple

from ..core.paths import header_dirs, header_file, op_file

# The engine's headers the Ops' C includes: its limits (tq_base.h) and the table it exports (tq_capi.h).
QUEUE_HEADERS = ("tq_base.h", "tq_capi.h")


class GraphFrontEnd:
    """What a Queue asks of a graph library.

    ``tensor`` is the library's tensor module (``as_tensor_variable``,
    ``reshape``, ``switch``, ``alloc``, ...) and ``Assert`` its assertion Op
    class, ``Assert(message)(value, *conditions)``: the variable-length
    layout builds its reshapes, masks and checks from them.
    """

    name: ClassVar[str]  # the library, for messages
    tensor: ClassVar[Any]
    Assert: ClassVar[Any]

    def dequeue(self, queue, sequence):
        """The engine's output variables of a new node that takes one element of ``queue``.

        ``sequence`` numbers the queue's nodes in the order they were made:
        a function runs them in that order, and never merges two of them.
        """
        raise NotImplementedError

    def enqueue(self, queue, sequence, inputs):
        """The int64 size variable of a new node that puts ``inputs`` (one per engine component)."""
        raise NotImplementedError


def enqueue_inputs(op, components, values, as_tensor_variable):
    """An Enqueue node's values as tensor variables (``as_tensor_variable`` is the graph library's), one per
    component, of its dtype and rank: ValueError or TypeError naming the Op and the component otherwise."""
    if len(values) != len(components):
        raise ValueError(
            "%s: expected %d components (%s), got %d"
            % (op, len(components), ", ".join(c.name for c in components), len(values))
        )
    checked = []
    for component, value in zip(components, values):
        value = as_tensor_variable(value)
        if value.dtype != component.dtype or value.ndim != len(component.shape):
            raise TypeError(
                "%s, component %r: expected a %d-d %s variable, got %d-d %s (%s)"
                % (op, component.name, len(component.shape), component.dtype, value.ndim, value.dtype, value)
            )
        checked.append(value)
    return checked


def unpicklable_message(queue_name, also=""):
    return (
        "queue '%s' cannot be pickled%s: its elements live in this process's memory (and the GPU's); "
        "make the queue and compile its functions in the process that uses them" % (queue_name, also)
    )


# ---- rings by key ---------------------------------------------------------------------
# A graph whose inputs must be plain arrays (PyTensor's Numba and JAX backends
# pass shared variables as arguments to one compiled function) names its queue
# by an int64 key; the Op looks the ring up here when it runs.

_rings: Dict[int, "weakref.ref[Any]"] = {}
_keys = itertools.count(1)
_lock = threading.Lock()


def register(ring):
    """A new int64 key for ``ring``; the registry holds it weakly (the Queue owns the ring)."""
    with _lock:
        key = next(_keys)
        _rings[key] = weakref.ref(ring, lambda _, key=key: _rings.pop(key, None))
    return key


def lookup(key, who):
    """The ring registered under ``key``, or a QueueError naming ``who`` when its queue is gone."""
    ref = _rings.get(int(key))
    return ring_or_error(ref() if ref is not None else None, who, " (or the function was unpickled in another process)")


def ring_or_error(ring, who, also=""):
    """``ring`` as a token gave it, or a QueueError naming ``who`` when the queue is gone (None): one message for
    every front end's token, ``also`` saying how else this front end's token may find none."""
    if ring is None:
        from ..core.errors import QueueError

        raise QueueError(
            "%s: its queue was deleted while a compiled function still uses it%s; keep the Queue alive as long as "
            "the functions that dequeue from it or enqueue into it, in the process that made it" % (who, also)
        )
    return ring


# ---- the Ops' shared part -----------------------------------------------------------


class QueueOpBase:
    """What both front ends' Dequeue and Enqueue share, mixed in before the library's C Op class.

    The contract: the class after it in the MRO is the library's file-based C
    Op (Theano's ``COp``, PyTensor's ``ExternalCOp``), built with
    :meth:`c_files` and giving ``c_code_cache_version`` for those files; a
    subclass sets ``c_file`` (its C file in c_code/ops/) and may add files
    before it in ``c_needs``.
    """

    c_file: ClassVar[str]
    c_needs: ClassVar[Tuple[str, ...]] = ()  # C files of c_code/ops/ whose sections come before the Op's own

    # The queue's name is for messages only: it must not split the compile
    # cache, so it is not a prop and the C code does not see it (the engine's
    # own messages name the queue).
    __props__: ClassVar[Tuple[str, ...]] = ("components",)

    def __init__(self, components, queue_name):
        self.components = tuple(components)
        self.queue_name = queue_name

    def c_files(self):
        return [op_file(name) for name in (*self.c_needs, self.c_file)]

    def __str__(self):
        return "%s{%s}" % (type(self).__name__, self.queue_name)

    def do_constant_folding(self, *node):  # Theano passes (node), PyTensor (fgraph, node)
        # Folding would run the Op once at compile time and freeze its result.
        return False

    def c_header_dirs(self, **kwargs):
        return header_dirs()

    def c_headers(self, **kwargs):
        return list(QUEUE_HEADERS)

    # How the node's C finds its ring: Theano's token is the ring's weak reference, which the engine resolves;
    # PyTensor's is a key, looked up first (key_token.c) into a new reference.
    ring_by_key: ClassVar[bool] = False

    def node_c(self, token, fail, declarations, call, guard_name=None, on_error=None):
        """The C of a node: ``declarations`` (its arrays), then ``call`` (a C expression of ``tq_ring``, 0 on
        success), between the thread guard's checks when ``guard_name`` (the node's name) is given; ``on_error``
        (a C statement) runs before ``fail`` when the call fails (without the guard)."""
        who = type(self).__name__
        if self.ring_by_key:
            find, release = 'PyObject *tq_ring = tq_ring_by_key("%s", %s);' % (who, token), "Py_XDECREF(tq_ring);"
        else:
            find, release = "PyObject *tq_ring = %s;" % token, ""
        call = "tq_ring ? %s : -1" % call
        if guard_name is None:
            failing = fail if on_error is None else "%s\n        %s" % (on_error, fail)
            body = ["int tq_rc = %s;" % call, release, "if (tq_rc != 0) {\n        %s\n    }" % failing]
        else:  # Theano's Dequeues alone: their token needs no release
            body = [self.one_thread_at_a_time(guard_name, call, fail)]
        return "{\n    %s\n}" % "\n    ".join(line for line in [find, *declarations, *body] if line)

    def dequeue_c(self, node, name, inputs, outputs, sub):
        """A Dequeue's node C: the engine takes the next element into the outputs (c_code/ops/dequeue.c)."""
        declarations = [
            "PyArrayObject **tq_outputs[] = {%s};" % ", ".join("&" + o for o in outputs),
            "const int tq_typenums[] = {%s};" % ", ".join(o.type.dtype_specs()[2] for o in node.outputs),
        ]
        call = 'tq_dequeue_into("%s", tq_ring, tq_outputs, tq_typenums, %d)' % (type(self).__name__, len(outputs))
        guard = name if isinstance(self, OneThreadAtATime) else None
        namer = getattr(self, "call_namer", None)
        on_error = 'tq_name_the_call("%s");' % namer if namer else None
        return self.node_c(inputs[0], sub["fail"], declarations, call, guard, on_error)

    def enqueue_c(self, node, name, inputs, outputs, sub):
        """An Enqueue's node C: the engine puts the inputs as one element (c_code/ops/enqueue.c)."""
        declarations = ["PyArrayObject *tq_inputs[] = {%s};" % ", ".join(inputs[1:])]
        call = 'tq_enqueue_from("%s", tq_ring, tq_inputs, %d, &%s)' % (type(self).__name__, len(inputs) - 1, outputs[0])
        return self.node_c(inputs[0], sub["fail"], declarations, call)

    def c_code_cache_version(self):
        # The C Op class hashes the Op's C files; the headers they include count too, and so does the class that
        # writes the node's own C (c_code and its struct members): the compile cache keys modules by this version.
        return super().c_code_cache_version() + (source_digest(type(self)),)


def source_digest(op_class):
    """A digest of the engine's headers the Ops include and of ``op_class``'s source and its bases' of this
    package (where a source is not kept, exec: the class's name, at least)."""
    digest = hashlib.sha256()
    for name in QUEUE_HEADERS:
        with open(header_file(name), "rb") as f:
            digest.update(f.read())
    for cls in op_class.__mro__:
        if cls.__module__.startswith("theano_queue."):
            digest.update(cls.__module__.encode())  # the C may import the class's module by name (call_namer)
            try:
                digest.update(inspect.getsource(cls).encode())
            except (OSError, TypeError):
                digest.update(cls.__qualname__.encode())
    return digest.hexdigest()


# What a Dequeue says when its compiled function is called from more than one thread (doc/tutorial.rst, "Threads").
NOT_THREAD_SAFE = (
    "a Theano function keeps its values in one storage of its own, so two threads calling it at once lose "
    "elements and break its calls; call it from one thread at a time, or compile one function per thread"
)
TWO_THREADS = "this compiled function was called from a second thread while a call waits for its element: " + (
    NOT_THREAD_SAFE
)
SECOND_THREAD = "theano_queue: a compiled function that dequeues was called from a second thread; " + NOT_THREAD_SAFE


class OneThreadAtATime:
    """A dequeue Op whose node knows who calls it (one guard per compiled function; C in thread_guard.c).

    A call from a second thread is warned about once; a call that comes while
    another thread's call waits for its element is refused with a QueueError,
    before it takes anything, so no element is lost.  Mixed in before
    :class:`QueueOpBase`: it adds ``thread_guard.c`` to the Op's C files.
    """

    c_needs: ClassVar[Tuple[str, ...]] = ("thread_guard.c",)

    def c_support_code_struct(self, node, name):
        return "tq_thread_guard tq_guard_%s;" % name

    def c_init_code_struct(self, node, name, sub):
        return "memset(&tq_guard_%(n)s, 0, sizeof tq_guard_%(n)s);" % dict(n=name)

    def one_thread_at_a_time(self, name, call, fail):
        """`call` (a C expression, 0 on success) between the node's guard's checks of who calls it."""
        return """if (tq_guard_enter(&tq_guard_%(name)s, "%(who)s: %(refused)s", "%(warned)s") < 0) {
        %(fail)s
    }
    int tq_rc = %(call)s;
    tq_guard_leave(&tq_guard_%(name)s);
    if (tq_rc != 0) {
        %(fail)s
    }""" % dict(name=name, who=type(self).__name__, refused=TWO_THREADS, warned=SECOND_THREAD, call=call, fail=fail)


# ---- ordering ----------------------------------------------------------------------


def is_queue_node(node):
    token = node.inputs[0] if node.inputs else None
    return token is not None and hasattr(token.tag, "queue_sequence")


def queue_orderings(fgraph):
    """{node: [the node before it]} for the nodes of each queue in ``fgraph``, in the order they were made.

    Two dequeues in one function are independent to the graph library; this
    makes the first ``q.dequeue()`` take the first element.  Data dependencies
    always point from older nodes to newer ones, so the order never makes a
    cycle.  An OrderedDict: Theano asks for one.
    """
    by_queue: Dict[Any, list] = OrderedDict()
    for node in fgraph.apply_nodes:
        if is_queue_node(node):
            queue, sequence = node.inputs[0].tag.queue_sequence
            by_queue.setdefault(queue, []).append((sequence, node))
    order: Dict[Any, list] = OrderedDict()
    for nodes in by_queue.values():
        nodes.sort(key=lambda pair: pair[0])
        for (_, before), (_, after) in zip(nodes, nodes[1:]):
            order[after] = [before]
    return order


class AttachesQueueOrder:
    """A graph rewriter that attaches ``feature`` (the library's QueueOrder) to every function graph using a queue.

    Mixed in before the library's rewriter class; a subclass sets ``feature``,
    and :meth:`attached` is called once for each graph it attached one to.
    """

    feature: ClassVar[type]

    def add_requirements(self, fgraph):
        pass

    def apply(self, fgraph):
        if any(isinstance(f, self.feature) for f in fgraph._features):
            return
        if any(is_queue_node(node) for node in fgraph.apply_nodes):
            fgraph.attach_feature(self.feature())
            self.attached(fgraph)

    def attached(self, fgraph):
        """What else a front end does for a graph that uses a queue (Theano's warns of several dequeues)."""
