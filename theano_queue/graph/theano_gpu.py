"""GpuDequeue and GpuEnqueue, and the optimizer that puts them in place of
Dequeue and Enqueue when a queue lives on a GPU: user code does not change.

GpuDequeue makes Theano's stream wait for the element's *filled* event (the
host never waits for the copy) and lends the slot's device block to the
graph where one of the ring's two spare blocks is free: its outputs are views
of the block, whose base (a Lease) gives it back when the last of them is
freed, with the block's *consumed* event recorded on Theano's stream so that
its next writer waits on the GPU.  The slot itself takes the spare and goes
back to the producers at once, so nothing the graph or a caller holds is
overwritten.  With no spare free it copies the slot device-to-device into its
outputs and records the slot's *consumed* event (doc/design.rst, "The
hand-off").

GpuEnqueue copies graph values into a slot on Theano's stream, so one compiled
function can produce into a queue that another consumes.
"""

import os

import pygpu
from theano import config
from theano.gof import Apply
from theano.gof.opt import local_optimizer
from theano.gpuarray.basic_ops import as_gpuarray_variable, gpuarray_helper_inc_dir, host_from_gpu
from theano.gpuarray.opt import register_opt
from theano.gpuarray.type import GpuArrayType, get_context, gpu_context_type
from theano.tensor import lscalar

from ..core.paths import header_dirs
from .theano import Dequeue, DequeueApply, Enqueue, OneThreadAtATime, QueueCOp

GPU_HEADERS = [
    "gpuarray/types.h",
    "gpuarray/array.h",
    "gpuarray/util.h",
    "gpuarray/extension.h",
    "gpuarray/kernel.h",
    "gpuarray/ext_cuda.h",
    "gpuarray_api.h",
    "numpy_compat.h",
    "gpuarray_helper.h",
]


class GpuQueueCOp(QueueCOp):
    """What the GPU Ops share: the context as params, libgpuarray's CUDA extension."""

    __props__ = ("components", "context_name")
    params_type = gpu_context_type

    def __init__(self, components, queue_name, context_name):
        super().__init__(components, queue_name)
        self.context_name = context_name

    def get_params(self, node):
        return get_context(self.context_name)

    def c_headers(self):
        return GPU_HEADERS + super().c_headers()

    def c_header_dirs(self):
        dirs = [gpuarray_helper_inc_dir(), pygpu.get_include(), *header_dirs()]
        for cuda_include in (config.cuda.include_path, "/usr/local/cuda/include"):
            if cuda_include and os.path.isdir(cuda_include) and cuda_include not in dirs:
                dirs.append(cuda_include)
        return dirs

    def c_libraries(self):
        return ["gpuarray"]


class GpuDequeue(OneThreadAtATime, GpuQueueCOp):
    """Dequeue whose outputs are GPU arrays, read from the ring's device slots."""

    c_file = "gpu_dequeue.c"

    def make_node(self, token):
        outputs = [GpuArrayType(c.dtype, c.broadcastable, context_name=self.context_name)() for c in self.components]
        return DequeueApply(self, [token], outputs)

    # The node keeps the buffers that wrap the blocks it was lent (gpu_dequeue.c, tq_block_cache).
    def c_support_code_struct(self, node, name):
        return super().c_support_code_struct(node, name) + " tq_block_cache tq_blocks_%s;" % name

    def c_init_code_struct(self, node, name, sub):
        return super().c_init_code_struct(node, name, sub) + " memset(&tq_blocks_%s, 0, sizeof tq_blocks_%s);" % (
            name,
            name,
        )

    def c_cleanup_code_struct(self, node, name):
        return "tq_block_cache_clear(&tq_blocks_%s);" % name

    def c_code(self, node, name, inputs, outputs, sub):
        declarations = [
            "PyGpuArrayObject **tq_outputs[] = {%s};" % ", ".join("&" + o for o in outputs),
            "const int tq_typecodes[] = {%s};" % ", ".join(str(o.type.typecode) for o in node.outputs),
        ]
        call = 'tq_gpu_dequeue_into(&tq_blocks_%s, "GpuDequeue", tq_ring, tq_outputs, tq_typecodes, %d, %s)' % (
            name,
            len(outputs),
            sub["params"],
        )
        return self.node_c(inputs[0], sub["fail"], declarations, call, guard_name=name)

    def perform(self, node, inputs, outputs, params):
        raise NotImplementedError("GpuDequeue runs through its C code only")


class GpuEnqueue(GpuQueueCOp):
    """Enqueue of GPU arrays: copies them into a slot on Theano's stream."""

    c_file = "gpu_enqueue.c"

    def make_node(self, token, *values):
        values = [as_gpuarray_variable(v, self.context_name) for v in values]
        for component, value in zip(self.components, values):
            if value.dtype != component.dtype or value.ndim != len(component.shape):
                raise TypeError(
                    "%s, component %r: expected a %d-d %s variable, got %d-d %s"
                    % (self, component.name, len(component.shape), component.dtype, value.ndim, value.dtype)
                )
        return Apply(self, [token] + values, [lscalar()])

    def c_code(self, node, name, inputs, outputs, sub):
        declarations = ["PyGpuArrayObject *tq_inputs[] = {%s};" % ", ".join(inputs[1:])]
        call = 'tq_gpu_enqueue_from("GpuEnqueue", tq_ring, tq_inputs, %d, &%s, %s)' % (
            len(inputs) - 1,
            outputs[0],
            sub["params"],
        )
        return self.node_c(inputs[0], sub["fail"], declarations, call)

    def perform(self, node, inputs, outputs, params):
        raise NotImplementedError("GpuEnqueue runs through its C code only")


def gpu_op(node, op_type, gpu_op_type):
    """The GPU Op for a node of ``op_type`` whose queue lives on a GPU, else None."""
    target = node.inputs[0].tag.queue_target if type(node.op) is op_type else None
    if target is None or not target.on_gpu:
        return None
    return gpu_op_type(node.op.components, node.op.queue_name, target.context_name)


@register_opt("fast_compile")
@local_optimizer([Dequeue])
def local_gpu_dequeue(node):
    """Dequeue of a GPU queue -> GpuDequeue; the rest of the graph follows it to the GPU."""
    op = gpu_op(node, Dequeue, GpuDequeue)
    return op and [host_from_gpu(out) for out in op.make_node(node.inputs[0]).outputs]


@register_opt("fast_compile")
@local_optimizer([Enqueue])
def local_gpu_enqueue(node):
    """Enqueue into a GPU queue -> GpuEnqueue, taking its values on the GPU."""
    op = gpu_op(node, Enqueue, GpuEnqueue)
    return op and op.make_node(*node.inputs).outputs
