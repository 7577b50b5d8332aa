"""What a small step pays for input with no queue at all: the floors that bench/step_profile.py's fed parts
are held against (``--floor``; issue 43.1).

Each floor is the resident step (its batch in shared variables) plus only the work that any feeder of a
GPU step has to add, done by the step's own thread:

  resident + record             before each step, the one call with which a slot's give-back orders
                                the slot's next copy after the step (cuEventRecord on the step's stream)
  resident + query, record      that, after asking whether the slot's copy is done (cuEventQuery): a
                                dequeue that would skip its wait for a copy already done
  resident + wait, record       that, after ordering the step after the slot's copy (cuStreamWaitEvent
                                on the step's stream): the calls of a dequeue of a ready slot, what a
                                pre-filled queue's dequeue cannot go under
  resident + upload, wait, record
                                those two, after the batch's upload, queued by the step's thread on a
                                stream of its own from registered memory (cuStreamWaitEvent,
                                cuMemcpyHtoDAsync per component, cuEventRecord): what the consumer's
                                dequeue does for an array dataset's batch that its producer left it
                                (doc/design.rst, "Small steps"), with no queue
  resident + host copy, upload, wait, record
                                that, and beside the step a thread of step_floor.c's that copies the
                                dataset's next batch into the next of three slots of the registered
                                memory the uploads read, woken before each step, while the step's
                                upload reads the slot copied the step before: what an array dataset's
                                producer does besides (in order, as a Feeder without shuffle takes the
                                batches; into the staging that its consumer's upload reads later), with
                                no queue
  resident + Python copy, upload, wait, record
                                the same with the copier a Python thread, which takes the next of the
                                batches a Feeder over a Python iterable gets (one ``next()`` a step)
                                and copies them with ``numpy.copyto``: what that Feeder's thread does
                                besides, the GIL it needs for each batch included, with no queue
  resident, sliced              the data in one shared variable, each step's batch sliced out of it in
                                the graph by a counter in a shared variable: the idiom of Theano's
                                tutorials (``givens`` and an index) for a dataset that fits in GPU
                                memory, which a held dataset (``Feeder(device=True)``) replaces

The driver calls are made by bench/step_floor.c (gcc), one ctypes call a step, in libgpuarray's context
and on its stream, with the engine's flags.
"""

import ctypes
import itertools
import mmap
import os
import queue
import subprocess
import tempfile
import threading

import numpy as np
import theano

#: The floors of driver calls: each part's name, and the calls made before each step.
CALL_FLOORS = {
    "resident + record": ("record",),
    "resident + query, record": ("query", "record"),
    "resident + wait, record": ("wait", "record"),
    "resident + upload, wait, record": ("upload", "wait", "record"),
    "resident + host copy, upload, wait, record": ("copy", "upload", "wait", "record"),
    "resident + Python copy, upload, wait, record": ("python copy", "upload", "wait", "record"),
}
SLICED = "resident, sliced"
#: The host copy's slots: the engine's default capacity, as step_profile's fed queue has.
COPY_SLOTS = 3

# The engine's flags: its events (CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC), its copy stream, its
# staging's registration.
_EVENT_FLAGS = 2 | 1
_STREAM_NON_BLOCKING = 1
_HOST_REGISTER_PORTABLE = 1
#: step_floor.c's bits for the calls it makes besides the record ("python copy" is made in Python).
_CALL_BITS = {"upload": 1, "query": 2, "wait": 4, "copy": 8, "python copy": 0}
#: The calls that wake a copier, which fills the next slot of the ring while the upload reads another.
_COPIES = ("copy", "python copy")


def upload_slot(step, slots):
    """The slot that a step's upload reads while a copier fills the ring, a slot a step (step 0 fills slot
    0): the one filled the step before, as an array dataset's consumer uploads a batch its producer wrote
    during an earlier step, never the one being written."""
    return (step - 1) % slots


class PythonCopier:
    """A Python thread that, woken once a step, takes the next of ``batches`` (tuples of arrays, as a Feeder
    over a Python iterable gets them from ``next()``) and copies each component into the next of ``slots``
    (tuples of arrays of the same shapes) in turn, with ``numpy.copyto``: the GIL for each batch, as that
    Feeder's thread needs it.  ``stop()`` first lets it make every copy asked for."""

    def __init__(self, batches, slots):
        self._batches, self._slots = itertools.cycle(batches), slots
        # A C queue: a wake costs the step's thread one call, not a Python Condition's lines (as the Feeder's
        # own wait for room is in C).
        self._wakes = queue.SimpleQueue()
        self.asked = self.made = 0
        self._thread = threading.Thread(target=self._run, name="step_floor Python copier", daemon=True)
        self._thread.start()

    def wake(self):
        self.asked += 1
        self._wakes.put(None)

    def _run(self):
        while True:
            self._wakes.get()
            if self.made == self.asked:
                return  # stop()'s wake, after every copy asked for
            for into, component in zip(self._slots[self.made % len(self._slots)], next(self._batches)):
                np.copyto(into, component)
            self.made += 1

    def stop(self):
        """Stops the thread once every copy asked for is made; how many it made."""
        if self._thread.is_alive():
            self._wakes.put(None)
            self._thread.join()
        return self.made


class DriverCalls:
    """Page-locked host memory and device memory for a batch's components, two events and a copy stream, in
    libgpuarray's context; ``before_step(calls)`` makes the calls a dequeue makes, as the engine does
    (c_code/engine/cuda/tq_cuda_upload.c): its host memory registered, one copy per component.  With
    ``dataset`` (an array), the host memory is COPY_SLOTS slots, and the calls named "copy" wake a thread
    that copies its next batch of ``component_bytes[0]`` bytes into the next slot beside the step, while
    the upload reads the slot copied the step before (upload_slot).  With ``batches`` (a list of tuples of
    arrays, the iterable part's), "python copy" wakes a PythonCopier that copies the next into the next
    slot instead."""

    def __init__(self, component_bytes, dataset=None, batches=None):
        from theano.gpuarray.type import get_context

        from theano_queue import _engine

        self.cu = cu = ctypes.CDLL(os.environ.get("THEANO_QUEUE_LIBCUDA", "libcuda.so.1"))
        gpu_context = get_context(None).ptr
        self.ctx = self._context_of(gpu_context)
        self.compute = ctypes.c_void_p(_engine.gpu_context_stream(gpu_context))
        total = sum(component_bytes)
        # With a copier: a ring of COPY_SLOTS slots, which the copier fills in turn and the uploads read.
        self.slot_bytes, slots = total, COPY_SLOTS if dataset is not None or batches is not None else 1
        self.steps_copied = 0
        total *= slots
        self.staging = mmap.mmap(-1, total)  # page-aligned, as the engine's shared staging is
        self.host = ctypes.addressof(ctypes.c_char.from_buffer(self.staging))
        self.device = ctypes.c_uint64()
        self.copy_stream, self.filled, self.consumed = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self._enter()
        try:
            self._check(
                "cuMemHostRegister",
                cu.cuMemHostRegister_v2(ctypes.c_void_p(self.host), ctypes.c_size_t(total), _HOST_REGISTER_PORTABLE),
            )
            self._check("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(self.device), ctypes.c_size_t(self.slot_bytes)))
            self._check("cuStreamCreate", cu.cuStreamCreate(ctypes.byref(self.copy_stream), _STREAM_NON_BLOCKING))
            for event in (self.filled, self.consumed):
                self._check("cuEventCreate", cu.cuEventCreate(ctypes.byref(event), _EVENT_FLAGS))
        finally:
            self._leave()
        n = len(component_bytes)
        offsets = [sum(component_bytes[:i]) for i in range(n)]
        self.extents = (
            n,
            (ctypes.c_uint64 * n)(*(self.device.value + o for o in offsets)),
            (ctypes.c_void_p * n)(*(self.host + o for o in offsets)),
            (ctypes.c_size_t * n)(*component_bytes),
        )
        self.c = _c_library()
        self.python_copier = None
        if batches is not None:
            first = batches[0]
            views = [
                tuple(
                    np.ndarray(a.shape, a.dtype, self.staging, j * self.slot_bytes + o) for a, o in zip(first, offsets)
                )
                for j in range(slots)
            ]
            self.python_copier = PythonCopier(batches, views)
        if dataset is not None:
            self._dataset = np.ascontiguousarray(dataset)  # read by the copier's thread until close()
            n_batches = self._dataset.nbytes // component_bytes[0]
            if self.c.floor_copier_start(
                self._dataset.ctypes.data, component_bytes[0], n_batches, self.host, slots, self.slot_bytes
            ):
                self.close()
                raise RuntimeError("step_floor: the host copy's thread did not start")

    def _context_of(self, gpu_context):
        """libgpuarray's CUcontext: current only between its cuda_enter and cuda_exit."""
        from theano_queue.tools.probe import gpuarray_enter_exit

        enter, leave = gpuarray_enter_exit()
        ctx = ctypes.c_void_p()
        enter(gpu_context)
        try:
            self._check("cuCtxGetCurrent", self.cu.cuCtxGetCurrent(ctypes.byref(ctx)))
        finally:
            leave(gpu_context)
        return ctx

    def _enter(self):
        self._check("cuCtxPushCurrent", self.cu.cuCtxPushCurrent_v2(self.ctx))

    def _leave(self):
        self.cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    @staticmethod
    def _check(call, rc):
        if rc:
            raise RuntimeError("step_floor: %s failed with CUDA error %d" % (call, rc))

    def before_step(self, calls):
        """The calls named (CALL_FLOORS' values) for one batch, in the context: one call into step_floor.c."""
        what = sum(_CALL_BITS[c] for c in calls if c != "record")
        offset = 0
        if any(c in _COPIES for c in calls):
            offset = upload_slot(self.steps_copied, COPY_SLOTS) * self.slot_bytes
            self.steps_copied += 1
        if "python copy" in calls:
            if self.python_copier is None:
                raise RuntimeError("step_floor: a Python copy was asked for, and no batches were given")
            self.python_copier.wake()
        rc = self.c.floor_calls(
            self.ctx, self.compute, self.copy_stream, self.filled, self.consumed, *self.extents, offset, what
        )
        self._check("the calls before a step", rc)

    def close(self):
        self.c.floor_copier_stop()
        if self.python_copier is not None:
            self.python_copier.stop()
        cu = self.cu
        self._enter()
        try:
            cu.cuStreamSynchronize(self.copy_stream)
            cu.cuEventDestroy_v2(self.filled)
            cu.cuEventDestroy_v2(self.consumed)
            cu.cuStreamDestroy_v2(self.copy_stream)
            cu.cuMemFree_v2(self.device)
            cu.cuMemHostUnregister(ctypes.c_void_p(self.host))
        finally:
            self._leave()


def _c_library():
    """step_floor.c, compiled (gcc) into a temporary folder and loaded, its functions typed."""
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="step_floor") as folder:  # a loaded library outlives its file
        library = os.path.join(folder, "step_floor.so")
        command = ["gcc", "-std=gnu11", "-O2", "-Wall", "-shared", "-fPIC", os.path.join(here, "step_floor.c")]
        subprocess.run(command + ["-o", library, "-ldl", "-lpthread"], check=True)
        c = ctypes.CDLL(library)
    if c.floor_load(os.environ.get("THEANO_QUEUE_LIBCUDA", "libcuda.so.1").encode()):
        raise RuntimeError("step_floor: the CUDA driver lacks a function step_floor.c calls")
    handle = ctypes.c_void_p
    c.floor_calls.argtypes = [handle] * 5 + [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    c.floor_calls.argtypes += [ctypes.c_size_t, ctypes.c_int]
    c.floor_calls.restype = ctypes.c_int
    c.floor_copier_start.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
    c.floor_copier_start.argtypes += [ctypes.c_size_t, ctypes.c_size_t]
    c.floor_copier_start.restype = ctypes.c_int
    c.floor_copier_made.argtypes, c.floor_copier_made.restype = [], ctypes.c_ulong
    c.floor_copier_stop.argtypes, c.floor_copier_stop.restype = [], ctypes.c_ulong
    return c


def sliced_batch(data, labels, batch):
    """(x, y, updates): each step's batch sliced out of the whole dataset in shared variables, the batch
    after it chosen by a counter in a shared variable that ``updates`` advances."""
    everything_x, everything_y = theano.shared(data), theano.shared(labels)
    batches = len(data) // batch
    # On the host: a counter on the GPU would be read back before every slice.
    turn = theano.shared(np.array(0, "int64"), name="turn", target="cpu")
    start = turn * batch
    return everything_x[start : start + batch], everything_y[start : start + batch], [(turn, (turn + 1) % batches)]


def with_calls(step, driver, calls):
    """step(), each call preceded by the driver calls named (one of CALL_FLOORS' values)."""

    def called():
        driver.before_step(calls)
        return step()

    return called
