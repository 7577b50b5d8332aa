"""Measurements of this machine's data paths: host-to-device bandwidth, host copy bandwidth.

The CUDA driver (``libcuda.so.1``, or the library that the environment
variable ``THEANO_QUEUE_LIBCUDA`` names) is loaded with ctypes on first use, so
this module imports anywhere; without a driver its GPU functions raise
:class:`~theano_queue.CudaError` saying so.  The engine's GPU queues load the
same library, named by the same variable, with a binding of their own
(``c_code/engine/cuda/tq_cuda_driver.h``); every driver function both call is bound to the
same versioned symbol with the same number of parameters, which
``tests/standin/test_probe.py`` checks against the engine's list.  Nothing here imports
Theano unless a Theano context name is given.

**Contexts.**  Every GPU measurement runs in the *primary context* of its
device (``cuDevicePrimaryCtxRetain``), made current with
``cuCtxPushCurrent`` for the measurement and popped and released afterwards,
on every path.  libgpuarray (0.7, CUDA >= 7) runs Theano in that same primary
context, so a measurement made while Theano is on the GPU shares Theano's
context rather than creating a second one.  A Theano context name is turned
into its device through libgpuarray's ``cuda_enter`` and ``cuCtxGetDevice``.
"""

import contextlib
import ctypes
import mmap
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..core.errors import CudaError

_CU_STREAM_NON_BLOCKING = 0x1
_CU_MEMHOSTALLOC_PORTABLE = 0x1
_CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
_CUDA_ERROR_NO_DEVICE = 100

_P = ctypes.POINTER
_c_int, _c_uint, _c_size, _c_void, _c_u64 = (
    ctypes.c_int,
    ctypes.c_uint,
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_uint64,
)

# name: (argument types, names to try in order)
_SIGNATURES = {
    "Init": ([_c_uint], ["cuInit"]),
    "DriverGetVersion": ([_P(_c_int)], ["cuDriverGetVersion"]),
    "GetErrorName": ([_c_int, _P(ctypes.c_char_p)], ["cuGetErrorName"]),
    "GetErrorString": ([_c_int, _P(ctypes.c_char_p)], ["cuGetErrorString"]),
    "DeviceGetCount": ([_P(_c_int)], ["cuDeviceGetCount"]),
    "DeviceGet": ([_P(_c_int), _c_int], ["cuDeviceGet"]),
    "DeviceGetName": ([ctypes.c_char_p, _c_int, _c_int], ["cuDeviceGetName"]),
    "DeviceGetPCIBusId": ([ctypes.c_char_p, _c_int, _c_int], ["cuDeviceGetPCIBusId"]),
    "DeviceTotalMem": ([_P(_c_size), _c_int], ["cuDeviceTotalMem_v2"]),
    "DeviceGetAttribute": ([_P(_c_int), _c_int, _c_int], ["cuDeviceGetAttribute"]),
    "DevicePrimaryCtxRetain": ([_P(_c_void), _c_int], ["cuDevicePrimaryCtxRetain"]),
    "DevicePrimaryCtxRelease": ([_c_int], ["cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"]),
    "CtxPushCurrent": ([_c_void], ["cuCtxPushCurrent_v2"]),
    "CtxPopCurrent": ([_P(_c_void)], ["cuCtxPopCurrent_v2"]),
    "CtxGetDevice": ([_P(_c_int)], ["cuCtxGetDevice"]),
    "MemGetInfo": ([_P(_c_size), _P(_c_size)], ["cuMemGetInfo_v2"]),
    "MemHostAlloc": ([_P(_c_void), _c_size, _c_uint], ["cuMemHostAlloc"]),
    "MemFreeHost": ([_c_void], ["cuMemFreeHost"]),
    "MemHostRegister": ([_c_void, _c_size, _c_uint], ["cuMemHostRegister_v2"]),
    "MemHostUnregister": ([_c_void], ["cuMemHostUnregister"]),
    "MemAlloc": ([_P(_c_u64), _c_size], ["cuMemAlloc_v2"]),
    "MemFree": ([_c_u64], ["cuMemFree_v2"]),
    "StreamCreate": ([_P(_c_void), _c_uint], ["cuStreamCreate"]),
    "StreamDestroy": ([_c_void], ["cuStreamDestroy_v2"]),
    "StreamSynchronize": ([_c_void], ["cuStreamSynchronize"]),
    "MemcpyHtoDAsync": ([_c_u64, _c_void, _c_size, _c_void], ["cuMemcpyHtoDAsync_v2"]),
    "MemcpyDtoHAsync": ([_c_void, _c_u64, _c_size, _c_void], ["cuMemcpyDtoHAsync_v2"]),
}


def _cuda_error(message: str, status: Optional[int] = None) -> CudaError:
    """A CudaError carrying the driver's status code (None when there is none) as ``status``."""
    exc = CudaError(message)
    exc.status = status
    return exc


class _Driver:
    """The driver functions this module calls, each raising CudaError on failure."""

    def __init__(self, lib):
        self._raw = {}
        for name, (argtypes, symbols) in _SIGNATURES.items():
            for symbol in symbols:
                fn = getattr(lib, symbol, None)
                if fn is not None:
                    fn.argtypes, fn.restype = argtypes, _c_int
                    self._raw[name] = fn
                    break
            else:
                raise _cuda_error("the CUDA driver (libcuda.so.1) lacks %s; it is too old" % symbols[0])

    def error_text(self, rc: int) -> str:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self._raw["GetErrorName"](rc, ctypes.byref(name))
        self._raw["GetErrorString"](rc, ctypes.byref(text))
        return "%s (%s)" % ((name.value or b"CUDA_ERROR_UNKNOWN").decode(), (text.value or b"no description").decode())

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        fn = self._raw[name]

        def call(*args):
            rc = fn(*args)
            if rc != 0:
                raise _cuda_error("cu%s: %s" % (name, self.error_text(rc)), rc)
            return rc

        return call

    def unchecked(self, name, *args):
        """For release paths, where a failure must not hide the error being raised."""
        return self._raw[name](*args)


_driver = None


def driver() -> _Driver:
    """The CUDA driver, loaded and initialised once; CudaError saying why when it cannot be."""
    global _driver
    if _driver is None:
        name = os.environ.get("THEANO_QUEUE_LIBCUDA") or "libcuda.so.1"
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            raise _cuda_error(
                "no CUDA driver: %s could not be loaded (%s); this needs an NVIDIA GPU and its driver" % (name, exc)
            ) from None
        cu = _Driver(lib)
        try:
            cu.Init(0)
        except CudaError as exc:
            if exc.status == _CUDA_ERROR_NO_DEVICE:
                raise _cuda_error(
                    "no GPU: the CUDA driver is installed but finds no device (%s)"
                    % cu.error_text(_CUDA_ERROR_NO_DEVICE),
                    _CUDA_ERROR_NO_DEVICE,
                ) from None
            raise
        _driver = cu
    return _driver


def driver_version() -> str:
    """The CUDA version the driver supports, as "major.minor"."""
    version = _c_int()
    driver().DriverGetVersion(ctypes.byref(version))
    return "%d.%d" % (version.value // 1000, version.value % 1000 // 10)


@contextlib.contextmanager
def device_context(device: int) -> Iterator[ctypes.c_void_p]:
    """The primary context of ``device`` (an ordinal), current in this thread for the block."""
    cu = driver()
    ctx = _c_void()
    cu.DevicePrimaryCtxRetain(ctypes.byref(ctx), device)
    try:
        cu.CtxPushCurrent(ctx)
        try:
            yield ctx
        finally:
            cu.unchecked("CtxPopCurrent", ctypes.byref(_c_void()))
    finally:
        cu.unchecked("DevicePrimaryCtxRelease", device)


def theano_device(context_name: Optional[str] = None) -> int:
    """The device ordinal of a Theano GPU context (None: Theano's default one)."""
    from ..core.target import theano_gpu_contexts

    contexts = theano_gpu_contexts()
    if context_name not in contexts:
        raise ValueError(
            "probe: %r is not a Theano GPU context (initialised contexts: %s)"
            % (context_name, ", ".join(map(repr, contexts)) or "none: Theano is not on a GPU")
        )
    from theano.gpuarray.type import get_context

    enter, leave = gpuarray_enter_exit()
    ptr, device = get_context(context_name).ptr, _c_int()
    cu = driver()
    enter(ptr)
    try:
        cu.CtxGetDevice(ctypes.byref(device))
    finally:
        leave(ptr)
    return device.value


def gpuarray_enter_exit():
    """libgpuarray's ``cuda_enter`` and ``cuda_exit``, as functions of a pygpu context's ``ptr``: between
    the two, that context's CUDA context is current on this thread (libgpuarray shows it no other way)."""
    libgpuarray = None
    for name in ("libgpuarray.so.3", "libgpuarray.so"):
        try:
            libgpuarray = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            break
        except OSError:
            continue
    if libgpuarray is None:
        raise _cuda_error("probe: libgpuarray is not loaded (is Theano on a GPU?)")
    get_extension = libgpuarray.gpuarray_get_extension
    get_extension.argtypes, get_extension.restype = [ctypes.c_char_p], _c_void
    enter = ctypes.CFUNCTYPE(None, _c_void)(get_extension(b"cuda_enter"))
    leave = ctypes.CFUNCTYPE(None, _c_void)(get_extension(b"cuda_exit"))
    return enter, leave


def _device_of(context_name, device):
    if device is not None:
        return int(device)
    if context_name is not None:
        return theano_device(context_name)
    # Theano's default GPU when Theano already runs on one; importing Theano just to ask is not worth it.
    if "theano" in sys.modules:
        from ..core.target import theano_gpu_contexts

        contexts = theano_gpu_contexts()
        if contexts:
            return theano_device(None if None in contexts else contexts[0])
    return 0


#: The host memory kinds h2d_seconds copies from (its ``memory``).
H2D_MEMORY = ("pinned", "pageable", "registered", "shared", "huge")


@contextlib.contextmanager
def _host_mapping(nbytes: int, memory: str) -> Iterator[int]:
    """The address of ``nbytes`` of a fresh mapping of kind ``memory`` ("registered", "shared" or "huge"; see
    h2d_seconds), filled; unmapped on exit."""
    if memory == "shared":  # as a queue's staging: a memfd mapped shared (c_code/engine/core/tq_shm.c)
        fd = os.memfd_create("theano_queue-probe")
        try:
            os.ftruncate(fd, nbytes)
            block = mmap.mmap(fd, nbytes, mmap.MAP_SHARED)
        finally:
            os.close(fd)
    else:
        block = mmap.mmap(-1, nbytes, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if memory == "huge":
            block.madvise(mmap.MADV_HUGEPAGE)  # before the first touch, which is when the kernel picks the pages
    try:
        view = np.frombuffer(block, np.uint8)
        view[:] = 1
        address = view.ctypes.data
        del view  # the map cannot close while an array exports it; the address stays valid until it does
        yield address
    finally:
        block.close()


@contextlib.contextmanager
def _host_source(cu: "_Driver", nbytes: int, memory: str) -> Iterator[int]:
    """The address of ``nbytes`` of host memory of kind ``memory`` (see h2d_seconds), filled; freed on exit."""
    if memory == "pinned":
        host = _c_void()
        cu.MemHostAlloc(ctypes.byref(host), nbytes, _CU_MEMHOSTALLOC_PORTABLE)
        try:
            ctypes.memset(host, 1, nbytes)
            yield host.value or 0  # never NULL once the allocation succeeded
        finally:
            cu.unchecked("MemFreeHost", host)
    elif memory == "pageable":
        array = np.ones(nbytes, np.uint8)  # held here: the copies read it
        yield array.ctypes.data
    else:
        with _host_mapping(nbytes, memory) as address:
            cu.MemHostRegister(address, nbytes, _CU_MEMHOSTALLOC_PORTABLE)
            try:
                yield address
            finally:
                cu.unchecked("MemHostUnregister", address)


def h2d_seconds(
    nbytes: int,
    repeats: int,
    context_name: Optional[str] = None,
    pinned: bool = True,
    device: Optional[int] = None,
    memory: Optional[str] = None,
) -> float:
    """Seconds per host-to-device copy of ``nbytes``: the mean of ``repeats`` copies after a warm-up.

    Each copy is a ``cuMemcpyHtoDAsync`` on a non-blocking stream, from host
    memory of the kind ``memory`` names:

    - ``"pinned"`` (the default): the driver's page-locked memory (``cuMemHostAlloc``);
    - ``"pageable"`` (also ``pinned=False``): ordinary memory (a numpy array);
    - ``"registered"``: an anonymous mapping page-locked with ``cuMemHostRegister``;
    - ``"shared"``: shared memory registered the same way, as a queue's staging is (worker processes map it);
    - ``"huge"``: as ``"registered"``, asked for transparent huge pages first (``madvise``).

    The device is that of the Theano GPU context ``context_name``, or ordinal
    ``device``; by default Theano's GPU when Theano runs on one, else device 0.

    >>> from theano_queue.tools.probe import h2d_seconds
    >>> gbps = 256 * 2**20 / h2d_seconds(256 * 2**20, 20) / 1e9   # doctest: +SKIP
    """
    nbytes, repeats = int(nbytes), int(repeats)
    if nbytes < 1 or repeats < 1:
        raise ValueError("h2d_seconds: nbytes and repeats must be >= 1, got %d and %d" % (nbytes, repeats))
    if memory is None:
        memory = "pinned" if pinned else "pageable"
    if memory not in H2D_MEMORY:
        raise ValueError("h2d_seconds: memory must be one of %s, got %r" % (", ".join(H2D_MEMORY), memory))
    cu = driver()
    with device_context(_device_of(context_name, device)), contextlib.ExitStack() as release:
        src = release.enter_context(_host_source(cu, nbytes, memory))
        dev = _c_u64()
        cu.MemAlloc(ctypes.byref(dev), nbytes)
        release.callback(cu.unchecked, "MemFree", dev)
        stream = _c_void()
        cu.StreamCreate(ctypes.byref(stream), _CU_STREAM_NON_BLOCKING)
        release.callback(cu.unchecked, "StreamDestroy", stream)
        cu.MemcpyHtoDAsync(dev, src, nbytes, stream)
        cu.StreamSynchronize(stream)
        started = time.perf_counter()
        for _ in range(repeats):
            cu.MemcpyHtoDAsync(dev, src, nbytes, stream)
        cu.StreamSynchronize(stream)
        return (time.perf_counter() - started) / repeats


def huge_page_share(nbytes: int, memory: str) -> float:
    """The share of a fresh ``nbytes`` mapping of kind ``memory`` ("registered", "shared" or "huge"; see
    h2d_seconds) that the kernel backs with huge pages, from ``/proc/self/smaps``: 0.0 where it gives none
    (or no such count).  What h2d_seconds copies from depends on it."""
    with _host_mapping(int(nbytes), memory) as address:
        return _huge_bytes(address) / int(nbytes)


def host_write_gbps(nbytes: int, memory: str, repeats: int = 5) -> float:
    """GB/s of one thread's ``np.copyto`` into a fresh ``nbytes`` mapping of kind ``memory`` ("registered",
    "shared" or "huge"; see h2d_seconds, not page-locked here): the median of ``repeats`` copies after one
    that touches the pages.  Beside huge_page_share it says what the pages cost a producer's write."""
    nbytes, repeats = int(nbytes), int(repeats)
    if nbytes < 1 or repeats < 1:
        raise ValueError("host_write_gbps: nbytes and repeats must be >= 1, got %d and %d" % (nbytes, repeats))
    src = np.ones(nbytes, np.uint8)
    with _host_mapping(nbytes, memory) as address:
        dst = np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(address))
        times = []
        for _ in range(repeats + 1):
            started = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - started)
        del dst
    return nbytes / statistics.median(times[1:]) / 1e9


def _huge_bytes(address: int) -> int:
    """Bytes of the mapping that holds ``address`` that huge pages back now."""
    try:
        with open("/proc/self/smaps") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    inside, huge = False, 0
    for line in lines:
        head = line.split(None, 1)[0] if line.strip() else ""
        if "-" in head and not head.endswith(":"):  # a mapping's first line: its address range
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside and head in ("AnonHugePages:", "ShmemPmdMapped:"):
            huge += int(line.split()[1]) * 1024
    return huge


def host_copy_gbps(
    nbytes: int, threads: Optional[int] = None, repeats: int = 5, via: str = "engine", statistic: str = "best"
) -> float:
    """GB/s of a host memory copy of ``nbytes``: the best of ``repeats`` copies after a warm-up.

    ``statistic="median"`` gives the median copy's instead: the rate a copy
    keeps while something else shares the memory (a DMA, other copies),
    where the best one is a lucky moment.

    ``via="engine"`` (the default) measures the copy a put makes: a numpy
    array into a slot of a host-memory queue, through the engine's pool of
    copy threads (``threads`` of them for the measurement; by default the
    pool as it is, ``theano_queue._engine.copy_threads()``).  ``via="numpy"``
    measures ``np.copyto`` in one thread.

    >>> from theano_queue.tools.probe import host_copy_gbps
    >>> host_copy_gbps(16 * 2**20) > 0.1
    True
    """
    from .. import _engine
    from ..core.queue import Queue

    nbytes, repeats = int(nbytes), int(repeats)
    if nbytes < 1 or repeats < 1:
        raise ValueError("host_copy_gbps: nbytes and repeats must be >= 1, got %d and %d" % (nbytes, repeats))
    if statistic not in ("best", "median"):
        raise ValueError("host_copy_gbps: statistic must be 'best' or 'median', got %r" % (statistic,))
    pick: Callable[[List[float]], float] = min if statistic == "best" else statistics.median
    src = np.ones(nbytes, np.uint8)
    if via == "numpy":
        dst = np.zeros_like(src)
        times = []
        for _ in range(repeats + 1):
            started = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - started)
        return nbytes / pick(times[1:]) / 1e9
    if via != "engine":
        raise ValueError("host_copy_gbps: via must be 'engine' or 'numpy', got %r" % (via,))
    before = _engine.copy_threads()
    if threads is not None:
        _engine.set_copy_threads(int(threads))
    try:
        q = Queue([("bytes", "uint8", (nbytes,))], capacity=1, target="cpu", name="host_copy_probe")
        times = []
        for _ in range(repeats + 1):  # the first put also touches the slot's pages: a warm-up
            started = time.perf_counter()
            q.put(src)
            times.append(time.perf_counter() - started)
            q.close(cancel_pending=True)  # drops the element without copying it out
            q.reopen()
    finally:
        if threads is not None:
            _engine.set_copy_threads(before)
    return nbytes / pick(times[1:]) / 1e9


def devices() -> List[Dict[str, Any]]:
    """The GPUs the driver sees: a list of dicts (ordinal, name, pci_bus_id, compute_capability,
    copy_engines, total_bytes, free_bytes).  Free memory is read in each device's primary context."""
    cu = driver()
    count = _c_int()
    cu.DeviceGetCount(ctypes.byref(count))
    found = []
    for ordinal in range(count.value):
        dev, name, bus = _c_int(), ctypes.create_string_buffer(256), ctypes.create_string_buffer(32)
        cu.DeviceGet(ctypes.byref(dev), ordinal)
        cu.DeviceGetName(name, 256, dev)
        cu.DeviceGetPCIBusId(bus, 32, dev)
        total, free, attrs = _c_size(), _c_size(), []
        cu.DeviceTotalMem(ctypes.byref(total), dev)
        for attribute in (
            _CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT,
            _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        ):
            value = _c_int()
            cu.DeviceGetAttribute(ctypes.byref(value), attribute, dev)
            attrs.append(value.value)
        entry = {
            "ordinal": ordinal,
            "name": name.value.decode(),
            "pci_bus_id": bus.value.decode(),
            "compute_capability": "%d.%d" % (attrs[1], attrs[2]),
            "copy_engines": attrs[0],
            "total_bytes": total.value,
            "free_bytes": None,
        }
        try:
            with device_context(dev.value):
                cu.MemGetInfo(ctypes.byref(free), ctypes.byref(_c_size()))
            entry["free_bytes"] = free.value
        except CudaError as exc:  # a device in exclusive use by another process, for one
            entry["error"] = str(exc)
        found.append(entry)
    return found


def self_check(device: int = 0, nbytes: int = 1 << 20) -> Dict[str, Tuple[bool, str]]:
    """Whether pinned memory and the copy engine work on ``device``: a dict of two (ok, detail) pairs.

    Allocates ``nbytes`` of pinned memory, copies a pattern to the device and
    back on a non-blocking stream, and compares.
    """
    cu = driver()
    result = {"pinned_memory": (False, "not tried"), "copy_engine": (False, "not tried")}
    with device_context(device), contextlib.ExitStack() as release:
        host = _c_void()
        try:
            cu.MemHostAlloc(ctypes.byref(host), 2 * nbytes, _CU_MEMHOSTALLOC_PORTABLE)
        except CudaError as exc:
            result["pinned_memory"] = (False, str(exc))
            return result
        release.callback(cu.unchecked, "MemFreeHost", host)
        result["pinned_memory"] = (True, "cuMemHostAlloc of %d bytes" % (2 * nbytes))
        address = int(host.value or 0)  # cuMemHostAlloc succeeded: not NULL
        view = np.frombuffer((ctypes.c_ubyte * (2 * nbytes)).from_address(address), np.uint8)  # type: ignore[call-overload]
        view[:nbytes] = np.arange(nbytes, dtype=np.uint64).astype(np.uint8)
        view[nbytes:] = 0
        try:
            dev, stream = _c_u64(), _c_void()
            cu.MemAlloc(ctypes.byref(dev), nbytes)
            release.callback(cu.unchecked, "MemFree", dev)
            cu.StreamCreate(ctypes.byref(stream), _CU_STREAM_NON_BLOCKING)
            release.callback(cu.unchecked, "StreamDestroy", stream)
            cu.MemcpyHtoDAsync(dev, address, nbytes, stream)
            cu.MemcpyDtoHAsync(address + nbytes, dev, nbytes, stream)
            cu.StreamSynchronize(stream)
        except CudaError as exc:
            result["copy_engine"] = (False, str(exc))
            return result
        same = bool(np.array_equal(view[:nbytes], view[nbytes:]))
        result["copy_engine"] = (
            same,
            "%d bytes to the device and back on a non-blocking stream: %s"
            % (nbytes, "identical" if same else "DIFFERENT"),
        )
    return result


def limits(
    pinned_gbps: Optional[float] = None, pageable_gbps: Optional[float] = None, copy_gbps: Optional[float] = None
) -> List[Tuple[str, Optional[float], str]]:
    """The bound on GB/s into a GPU queue for each kind of source, from measured figures.

    A list of (source kind, GB/s or None, why).  Data that is already
    page-locked crosses the bus as it is: the pinned host-to-device rate.  A
    numpy array put into the queue is first copied into pinned staging while
    the previous element crosses the bus; each byte delivered then costs three
    bytes of host memory traffic (read by the copy, written by it, read by the
    DMA engine), and the copy at ``copy_gbps`` moves two, so memory sustains
    about ``2 * copy_gbps`` of traffic: the bound is ``2/3 * copy_gbps``, or the
    bus, whichever is lower.
    """

    def lowest(*values: Optional[float]) -> Optional[float]:
        known = [v for v in values if v is not None]
        return min(known) if known else None

    copied = None if copy_gbps is None else 2.0 * copy_gbps / 3.0
    return [
        (
            "registered (Queue.register_host) or written in place (Queue.writer, Feeder(fill=...))",
            pinned_gbps,
            "pinned host-to-device bandwidth: no host copy",
        ),
        (
            "numpy arrays put or fed (copied into pinned staging)",
            lowest(pinned_gbps, copied),
            "min(pinned bandwidth, 2/3 x host copy bandwidth): three bytes of memory traffic per byte delivered",
        ),
        (
            "pageable memory handed to the driver (for comparison: not a queue path)",
            pageable_gbps,
            "pageable host-to-device bandwidth: the driver stages it through its own pinned buffers",
        ),
        ("host-memory queue (target='cpu')", copy_gbps, "host copy bandwidth: a put copies into the slot"),
    ]
