"""Device arrays in and out of GPU queues.

A put accepts, per component, any of:

* an object with ``__cuda_array_interface__`` (v2 or v3: pycuda, CuPy, Numba,
  torch), its strides and, for v3, its ``stream`` honoured;
* an object with ``__dlpack__`` whose ``__dlpack_device__`` is a CUDA device
  (or CUDA managed memory);
* a pygpu ``GpuArray``.

Each becomes the plain description the engine takes, ``(ptr, shape, strides,
dtype, stream)``, plus what must stay alive until the copy has read it; the
engine (``c_code/python/tq_py_device.c``, ``tq_cuda.c``) checks it and copies it
device to device.  ``q.get(device=True)`` goes the other way and returns
:class:`DeviceArray` objects.
"""

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from .. import _engine
from . import schema

# DLPack device types (dlpack.h).
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
DL_NAMES = {
    1: "CPU",
    2: "CUDA",
    3: "CUDA host (pinned)",
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    10: "ROCm",
    11: "ROCm host",
    13: "CUDA managed",
    14: "oneAPI",
}


_NOT_LOOKED_UP = object()
_gpuarray_type: Any = _NOT_LOOKED_UP


def _pygpu_array_type():
    """pygpu's GpuArray, or None without pygpu: looked up once (a put asks it per component)."""
    global _gpuarray_type
    if _gpuarray_type is _NOT_LOOKED_UP:
        try:
            from pygpu.gpuarray import GpuArray
        except ImportError:
            GpuArray = None
        _gpuarray_type = GpuArray
    return _gpuarray_type


def reader_of(value: Any) -> Optional[Callable[..., Tuple[Tuple[Any, ...], Any]]]:
    """How a device put describes ``value`` (one of the ``_from_*`` readers), or None for host data.

    Asked once per value a put: the answer picks the path and then reads the value.
    """
    if isinstance(value, np.ndarray):
        return None
    gpuarray = _gpuarray_type if _gpuarray_type is not _NOT_LOOKED_UP else _pygpu_array_type()
    if gpuarray is not None and isinstance(value, gpuarray):  # first: Theano's own, no failed attribute lookup
        return _from_pygpu
    if hasattr(value, "__cuda_array_interface__"):
        return _from_cai
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__") and _dlpack_device(value)[0] != DL_CPU:
        return _from_dlpack
    return None


def is_device_array(value: Any) -> bool:
    """True for what a device put takes: CUDA Array Interface, CUDA DLPack, pygpu."""
    return reader_of(value) is not None


def _dlpack_device(value):
    try:
        return tuple(value.__dlpack_device__())
    except Exception:  # a broken producer: let the put report it
        return (-1, -1)


def stream_handle(stream: Any, where: str) -> Optional[int]:
    """A CUstream handle (int) from ``stream``: None, an int, or a library's stream object.

    pycuda's ``Stream`` (``.handle``), CuPy's (``.ptr``), torch's
    (``.cuda_stream``) and Numba's (``.handle.value``) are understood.
    """
    if stream is None or isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        return None if stream is None else int(stream)
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        value = getattr(value, "value", value)  # a ctypes handle
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
    raise TypeError(
        "%s: stream must be None, a CUstream handle (int) or a stream object of pycuda, CuPy or torch, got %r"
        % (where, stream)
    )


class DeviceSource:
    """One component of a device put: the engine's description and what keeps the memory alive."""

    __slots__ = ("description", "keep")

    def __init__(self, description: Tuple[Any, ...], keep: Any = None) -> None:
        self.description = description  # (ptr, shape, strides or None, dtype, stream or None)
        self.keep = keep  # the producer's object (or a DLPack owner) until the copy has read it


def device_source(value: Any, component: Any, queue_name: str, stream: Any, copy_stream: Optional[int]) -> DeviceSource:
    """The :class:`DeviceSource` of one component's value, or a TypeError saying what came."""
    reader = reader_of(value) or _from_dlpack  # not a device array: _from_dlpack says what came
    source = DeviceSource(*reader(value, queue_name, component, stream, copy_stream))
    schema.device_dtype(component, source.description[3], queue_name)
    return source


def _where(queue_name, component):
    """Who refuses a value, for the messages: built only when one is refused, not on every put."""
    return schema.where(queue_name, component)


_DTYPES: Dict[str, np.dtype] = {}  # typestr -> dtype: np.dtype() parses the string every time


def _dtype(typestr):
    dtype = _DTYPES.get(typestr) if type(typestr) is str else None
    if dtype is None:
        dtype = np.dtype(typestr)
        if type(typestr) is str and len(_DTYPES) < 256:
            _DTYPES[typestr] = dtype
    return dtype


# The readers: (description, keep) of one component's value, description as the engine takes it,
# (ptr, shape, strides or None, dtype, stream or None), keep what must stay alive until the copy has read it.


def _from_cai(value, queue_name, component, stream, _copy_stream):
    cai = value.__cuda_array_interface__
    try:
        shape, typestr, (ptr, _readonly) = tuple(cai["shape"]), cai["typestr"], cai["data"]
    except (KeyError, TypeError, ValueError):
        raise TypeError(
            "%s: a __cuda_array_interface__ without shape, typestr and data: %r" % (_where(queue_name, component), cai)
        ) from None
    get = cai.get
    if get("mask") is not None:
        raise TypeError(
            "%s: a masked device array (__cuda_array_interface__ 'mask'); put the data unmasked"
            % _where(queue_name, component)
        )
    strides = get("strides")
    # v3's stream: None says the data is ready; an int is the stream its writes
    # are queued on.  Before v3 there is no stream: the put's own, if any.
    own = get("stream") if get("version", 0) >= 3 else None
    if own is None:
        own = stream
    elif not isinstance(own, int):
        raise TypeError(
            "%s: __cuda_array_interface__ 'stream' must be None or an int, got %r"
            % (_where(queue_name, component), own)
        )
    dtype = _DTYPES.get(typestr) if type(typestr) is str else None
    return (ptr or 0, shape, None if strides is None else tuple(strides), dtype or _dtype(typestr), own), value


def pygpu_address(array):
    """The device address of a pygpu GpuArray's first item (pygpu's ``gpudata`` adds the offset)."""
    return array.gpudata


def _from_pygpu(array, _queue_name=None, _component=None, _stream=None, _copy_stream=None):
    # libgpuarray computes on one stream per context (Theano's default,
    # gpuarray.single_stream=True): ordering after it orders after every
    # write into the array.
    stream = _engine.gpu_context_stream(array.context.ptr)
    return (array.gpudata, array.shape, array.strides, array.dtype, stream), array


def _from_dlpack(value, queue_name, component, _stream, copy_stream):
    device_type, device_id = _dlpack_device(value)
    if device_type not in (DL_CUDA, DL_CUDA_MANAGED):
        raise TypeError(
            "%s: a DLPack array on a %s device (type %d); a GPU queue takes CUDA device memory, and host data as a "
            "numpy array" % (_where(queue_name, component), DL_NAMES.get(device_type, "unknown"), device_type)
        )
    # DLPack's consumer protocol: the producer orders its work before the
    # stream we name, the one the copy runs on.
    capsule = value.__dlpack__(stream=copy_stream)
    owner, ptr, shape, strides, typestr, _type, _id = _engine.dlpack_source(capsule)
    return (ptr, shape, strides, _dtype(typestr), None), owner


def put(
    ring: _engine.Ring,
    layout: Any,
    values: Sequence[Any],
    queue_name: str,
    timeout: Optional[float],
    stop: Optional[_engine.Stop],
    stream: Any,
    upload: Optional[Callable[[np.ndarray], DeviceSource]] = None,
    readers: Optional[Sequence[Any]] = None,
) -> int:
    """A device put of one element: values in component order, every one a device array.

    A variable-length component's value is a :class:`~theano_queue.Padded`
    device array with its row lengths on the host (``layout.py``);
    ``upload(array)`` then puts the lengths on the device and returns their
    :class:`DeviceSource` (:func:`uploader` makes one for a pygpu context).
    ``readers`` are the values' :func:`reader_of`, when the caller asked
    already.
    """
    if not layout.variables:
        if readers is None:
            readers = [reader_of(value) for value in values]
        return put_fixed(ring, layout.components, values, readers, queue_name, timeout, stop, stream)
    handle = None if stream is None else stream_handle(stream, "Queue.put: queue %r" % queue_name)
    copy_stream = ring.copy_stream
    descriptions, keep = [], []
    for i, (component, value) in enumerate(zip(layout.components, values)):
        if i in layout.variables:
            parts, alive = variable_descriptions(layout.variables[i], value, queue_name, handle, copy_stream, upload)
            descriptions.extend(parts)
            keep.extend(alive)
        else:
            source = device_source(value, component, queue_name, handle, copy_stream)
            descriptions.append(source.description)
            keep.append(source)
    return ring.put_device(descriptions, timeout, stop)


def put_fixed(
    ring: _engine.Ring,
    components: Sequence[Any],
    values: Sequence[Any],
    readers: Sequence[Any],
    queue_name: str,
    timeout: Optional[float],
    stop: Optional[_engine.Stop],
    stream: Any,
) -> int:
    """:func:`put` of an element without variable-length components: one description per component.

    ``readers`` are the values' :func:`reader_of` (None refuses the value,
    saying what came).  The lean path of a device producer's puts: besides
    the schema's dtype rule (one comparison per component), nothing here is
    done that the engine's own checks repeat.
    """
    handle = None if stream is None else stream_handle(stream, "Queue.put: queue %r" % queue_name)
    copy_stream = ring.copy_stream
    descriptions, keep = [], []  # keep: what must stay alive (a DLPack owner) until put_device has the memory
    for reader, component, value in zip(readers, components, values):
        description, alive = (reader or _from_dlpack)(value, queue_name, component, handle, copy_stream)
        if description[3] != component.dtype:  # the schema's rule for device arrays: the exact dtype
            schema.device_dtype(component, description[3], queue_name)
        descriptions.append(description)
        keep.append(alive)
    return ring.put_device(descriptions, timeout, stop)


def uploader(context: Any) -> Callable[[np.ndarray], DeviceSource]:
    """``upload(array)`` for :func:`put`: a host array copied into a pygpu array of ``context``, on its stream."""
    import pygpu

    def upload(array):
        on_gpu = pygpu.gpuarray.array(np.ascontiguousarray(array), context=context)
        return DeviceSource(*_from_pygpu(on_gpu))

    return upload


def variable_descriptions(variable, value, queue_name, stream, copy_stream, upload):
    """A variable-length component's engine descriptions from a padded device array and host lengths.

    The data is described as the array's first ``n`` rows cut to the
    element's extent on each variable axis (the array's own strides: the
    copy packs them, device to device); the lengths are uploaded into the
    queue's context; the extents are zero-byte descriptions (their row
    counts are the extents).  What lies past a row's length crosses as the
    array holds it.  Returns the descriptions and what must stay alive.
    """
    from .layout import Padded

    if not isinstance(value, Padded):
        raise TypeError(
            "%s: a device array for a variable-length component needs its row lengths: "
            "q.put(..., lengths={%r: lengths}) or tq.Padded(device_array, lengths)"
            % (variable.where(queue_name), variable.name)
        )
    source = device_source(value.data, variable.component, queue_name, stream, copy_stream)
    ptr, shape, strides, dtype, own_stream = source.description
    shape = tuple(int(n) for n in shape)
    if len(shape) != len(variable.bounds):
        raise ValueError(
            "%s: expected a padded device array of %d dimensions (the component is %s), got shape %s"
            % (variable.where(queue_name), len(variable.bounds), variable.component.shape, shape)
        )
    n = shape[0]
    variable.check_rows(n, queue_name)
    variable.check_fixed_axes(shape, 0, queue_name, "the device array")
    lengths = variable.check_lengths(value.lengths, n, [shape[a] for a in variable.axes], queue_name)
    extents = variable.extents(lengths)
    if strides is None:  # C order
        strides = tuple(int(np.prod(shape[d + 1 :], dtype=np.int64)) * dtype.itemsize for d in range(len(shape)))
    on_gpu = upload(lengths.reshape((n,) + variable.engine[1].shape[1:]))
    data = (ptr, variable.packed_shape(n, extents), tuple(strides), dtype, own_stream, len(variable.middle) + 1)
    parts = [data, on_gpu.description]
    parts += [(0, (extent, 0), None, np.dtype("uint8"), None) for extent in extents]
    return parts, [source, on_gpu]


class DeviceArray:
    """An element's component on the GPU, as ``q.get(device=True)`` returns it.

    ``gpuarray`` is a pygpu ``GpuArray`` in the queue's context (Theano's);
    ``__cuda_array_interface__`` (v3) lets CuPy, Numba, pycuda or torch read
    it without a copy.  Its ``stream`` is the one the data is ready on:
    libgpuarray's, on which the element was copied out of the queue.
    """

    def __init__(self, gpuarray: Any, stream: Any) -> None:
        self.gpuarray = gpuarray
        self.stream = stream

    shape = property(lambda self: tuple(self.gpuarray.shape))
    dtype = property(lambda self: np.dtype(self.gpuarray.dtype))

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        a = self.gpuarray
        return {
            "shape": tuple(a.shape),
            "typestr": np.dtype(a.dtype).str,
            "data": (pygpu_address(a), False),
            "strides": None if a.flags.c_contiguous else tuple(a.strides),
            "version": 3,
            "stream": self.stream,
        }

    def get(self) -> np.ndarray:
        """A numpy copy on the host (waits for the data)."""
        return np.asarray(self.gpuarray)

    def __repr__(self) -> str:
        return "<DeviceArray %s %s>" % (self.dtype, self.shape)


def get(
    ring: _engine.Ring, components: Sequence[Any], context: Any, timeout: Optional[float]
) -> Tuple[DeviceArray, ...]:
    """The next element as :class:`DeviceArray` objects in ``context`` (a pygpu GpuContext)."""
    import pygpu

    arrays = [pygpu.empty(c.shape, dtype=c.dtype, context=context) for c in components]
    stream = _engine.gpu_context_stream(context.ptr)
    rows = ring.take_device([pygpu_address(a) for a in arrays], stream, timeout)
    return tuple(DeviceArray(a[:r] if c.shape else a, stream) for a, c, r in zip(arrays, components, rows))
