"""What the device-array tests run against the stand-in driver share (imported
in the subprocess that loads it): fake device memory, a __cuda_array_interface__
and a DLPack producer over it, and a GPU ring in the stand-in's context."""

import ctypes
import os

import numpy as np

from theano_queue import _engine
from theano_queue.core import device_arrays as device
from theano_queue.core.layout import Layout
from theano_queue.core.spec import parse_components

driver = ctypes.CDLL(os.environ["THEANO_QUEUE_LIBCUDA"])
PRIMARY = 0x1000  # the stand-in's primary context of device 0; 0x1001 is device 1's
OTHER_CONTEXT = 0x2000  # another context on device 0


allocated = []


def device_copy(host, context=PRIMARY):
    """A numpy array of `host`'s values in the stand-in's device memory of `context` (host memory it knows)."""
    p = ctypes.c_ulonglong()
    assert driver.cuCtxPushCurrent_v2(ctypes.c_void_p(context)) == 0
    assert driver.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(host.nbytes, 1))) == 0
    driver.cuCtxPopCurrent_v2(None)
    allocated.append(p.value)
    view = np.ctypeslib.as_array((ctypes.c_ubyte * max(host.nbytes, 1)).from_address(p.value))
    array = view[: host.nbytes].view(host.dtype).reshape(host.shape)
    array[...] = host
    return array


class CAI:
    """A producer's device array, as __cuda_array_interface__ v3 describes it: `array` (any strides)."""

    def __init__(self, array, stream=None, version=3):
        self.__cuda_array_interface__ = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (array.__array_interface__["data"][0], False),
            "strides": None if array.flags.c_contiguous else array.strides,
            "version": version,
            "stream": stream,
        }


class CudaDLPack:
    """A DLPack producer whose tensor is in the stand-in's device memory."""

    def __init__(self, array, device_type=2):
        self.array, self.device_type, self.streams = array, device_type, []

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.array.__dlpack__()


def free_device_memory():
    """Frees what device_copy allocated (the stand-in reports what is left at exit)."""
    while allocated:
        driver.cuMemFree_v2(ctypes.c_ulonglong(allocated.pop()))


def gpu_ring(spec, capacity=2, name="q", pad_value=None):
    """A GPU ring in the stand-in's primary context, and the layout of its components (as a Queue makes them)."""
    layout = Layout(parse_components(spec, name, pad_value))
    ring = _engine.Ring(name, [(c.name, c.dtype, c.shape) for c in layout.engine], capacity, cu_context=PRIMARY)
    ring.batch = layout.engine_batch  # whose rows agree, as a Queue's Port says
    return ring, layout


def gpu_queue(spec, capacity=2, name="q"):
    """A Queue whose ring is a GPU ring in the stand-in's primary context: its put, with device arrays, as a
    GPU queue's (Theano's GPU context is what the stand-in cannot give)."""
    from theano_queue import Queue
    from theano_queue.core.port import Port
    from theano_queue.core.target import Target

    q = Queue(spec, capacity=capacity, target="cpu", name=name)
    q._ring.close()
    ring, layout = gpu_ring(spec, capacity, name)
    q._ring, q._layout = ring, layout
    q._port = Port(name, q.components, layout, Target("gpu", True), ring)
    return q


UPLOAD_STREAM = 7  # the stream an upload is queued on, as libgpuarray's is in a Queue


def upload(host):
    """The stand-in's upload of a variable-length component's lengths: a copy in its device memory."""
    array = device_copy(host)
    return device.DeviceSource(
        (array.__array_interface__["data"][0], array.shape, None, array.dtype, UPLOAD_STREAM), keep=array
    )


def put(ring, layout, values, stream=None, name="q"):
    return device.put(ring, layout, values, name, None, None, stream, upload)


_log_read = 0  # bytes of the stand-in's log read so far


def log():
    """The stand-in's stream-ordering calls since the last call (FAKE_CUDA_LOG).  The log is read on from where
    the last call stopped, whole lines only, never truncated: a ring's issuer thread may be appending to it."""
    global _log_read
    try:
        with open(os.environ["FAKE_CUDA_LOG"], "rb") as f:
            f.seek(_log_read)
            new = f.read()
    except FileNotFoundError:
        return []
    whole = new[: new.rfind(b"\n") + 1]
    _log_read += len(whole)
    return whole.decode().split("\n")[:-1]
