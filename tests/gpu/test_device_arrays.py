"""Device arrays in and out of GPU queues, on a GPU (tests/standin/test_device_fake.py
runs the backend's paths against the stand-in driver on any machine).

Producers: pygpu GpuArrays, a small __cuda_array_interface__ wrapper over
pygpu memory (strides and stream of our choosing), memory of the device's
primary context and of another context made with the driver API (ctypes), and
pycuda when it is importable.  Run with THEANO_FLAGS=device=cuda0:
``pytest tests/gpu/test_device_arrays.py``.
"""

import ctypes

import numpy as np
import pytest
from helpers import TAGGED, two_producers_exactly_once

import theano_queue as tq

pytestmark = pytest.mark.gpu

SPEC = [("x", "float32", (8, 5, 6)), ("y", "int16", (8,))]


def context():
    from theano.gpuarray.type import get_context

    return get_context(None)


def on_gpu(host):
    import pygpu

    return pygpu.gpuarray.array(np.ascontiguousarray(host), context=context())


class PygpuCAI:
    """A __cuda_array_interface__ v3 over a pygpu array's memory, strides and stream given by the test."""

    def __init__(self, array, stream=None, strides="own"):
        self.array = array  # keeps the memory alive
        self.__cuda_array_interface__ = {
            "shape": tuple(array.shape),
            "typestr": np.dtype(array.dtype).str,
            "data": (array.gpudata, False),
            "strides": tuple(array.strides) if strides == "own" else strides,
            "version": 3,
            "stream": stream,
        }


def theano_stream():
    from theano_queue import _engine

    return _engine.gpu_context_stream(context().ptr)


# ---- the driver API through ctypes: producers outside libgpuarray ------------------------------


class Driver:
    """libcuda through ctypes: memory, streams and busy work in a context of our choosing."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        assert self.cu.cuInit(0) == 0
        self.device = ctypes.c_int()
        self.check(self.cu.cuDeviceGet(ctypes.byref(self.device), 0))
        self.primary = ctypes.c_void_p()
        self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.primary), self.device))
        self.held = []

    @staticmethod
    def check(rc):
        assert rc == 0, "CUDA driver call failed: %d" % rc

    def other_context(self):
        ctx = ctypes.c_void_p()
        create = getattr(self.cu, "cuCtxCreate_v2", None)
        if create is None:
            pytest.skip("the driver exports no cuCtxCreate_v2")
        self.check(create(ctypes.byref(ctx), 0, self.device))
        self.check(self.cu.cuCtxPopCurrent_v2(None))  # cuCtxCreate makes it current: leave none current
        return ctx

    def alloc(self, nbytes, ctx=None):
        ptr = ctypes.c_ulonglong()
        self.check(self.cu.cuCtxPushCurrent_v2(ctx or self.primary))
        self.check(self.cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
        self.cu.cuCtxPopCurrent_v2(None)
        self.held.append((ptr.value, ctx or self.primary))
        return ptr.value

    def upload(self, host, ctx=None):
        ptr = self.alloc(host.nbytes, ctx)
        self.check(self.cu.cuCtxPushCurrent_v2(ctx or self.primary))
        self.check(
            self.cu.cuMemcpyHtoD_v2(
                ctypes.c_ulonglong(ptr), host.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(host.nbytes)
            )
        )
        self.cu.cuCtxPopCurrent_v2(None)
        return ptr

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.cu.cuCtxPushCurrent_v2(self.primary))
        self.check(self.cu.cuStreamCreate(ctypes.byref(s), 1))  # non-blocking
        self.cu.cuCtxPopCurrent_v2(None)
        return s.value

    def busy_then_fill(self, stream, scratch, scratch_words, ptr, words, value, rounds=1000):
        """Queues ~rounds x scratch worth of memsets on stream, then fills ptr with value: late data."""
        self.check(self.cu.cuCtxPushCurrent_v2(self.primary))
        for _ in range(rounds):
            self.check(
                self.cu.cuMemsetD32Async(
                    ctypes.c_ulonglong(scratch),
                    ctypes.c_uint(7),
                    ctypes.c_size_t(scratch_words),
                    ctypes.c_void_p(stream),
                )
            )
        self.check(
            self.cu.cuMemsetD32Async(
                ctypes.c_ulonglong(ptr), ctypes.c_uint(value), ctypes.c_size_t(words), ctypes.c_void_p(stream)
            )
        )
        self.cu.cuCtxPopCurrent_v2(None)

    def fill(self, ptr, words, value):
        """Sets `words` uint32 at ptr to value, and waits for it: what a producer without a stream does."""
        if not hasattr(self, "fill_stream"):
            self.fill_stream = self.stream()
        self.busy_then_fill(self.fill_stream, 0, 0, ptr, words, value, rounds=0)
        self.check(self.cu.cuStreamSynchronize(ctypes.c_void_p(self.fill_stream)))

    def pointer_context(self, ptr):
        ctx = ctypes.c_void_p()
        self.check(self.cu.cuPointerGetAttribute(ctypes.byref(ctx), 1, ctypes.c_ulonglong(ptr)))
        return ctx.value

    def free(self):
        for ptr, ctx in self.held:
            self.cu.cuCtxPushCurrent_v2(ctx)
            self.cu.cuCtxSynchronize()
            self.cu.cuMemFree_v2(ctypes.c_ulonglong(ptr))
            self.cu.cuCtxPopCurrent_v2(None)
        self.held = []


class RawCAI:
    def __init__(self, ptr, shape, dtype, strides=None, stream=None):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": np.dtype(dtype).str,
            "data": (ptr, False),
            "strides": strides,
            "version": 3,
            "stream": stream,
        }


@pytest.fixture
def driver():
    d = Driver()
    yield d
    d.free()


def element(seed, rows=8):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, 5, 6)).astype("float32"), rng.integers(-999, 999, rows).astype("int16")


# ---- puts ---------------------------------------------------------------------------------------


def test_pygpu_arrays_round_trip_bit_exact_contiguous_and_strided():
    q = tq.Queue(SPEC, capacity=3)
    x, y = element(0, rows=16)
    gx, gy = on_gpu(x), on_gpu(y)
    views = [
        (gx[:8], gy[:8]),  # contiguous
        (gx[::2], gy[::2]),  # strided rows
        (gx[3:11, ::-1, ::-1], gy[11:3:-1]),  # negative strides, the innermost too
        (gx[:8].transpose(0, 2, 1).transpose(0, 2, 1), gy[:8]),
    ]
    for vx, vy in views:
        q.put(vx, vy)
        got_x, got_y = q.get()
        assert got_x.tobytes() == np.asarray(vx).tobytes() and got_y.tobytes() == np.asarray(vy).tobytes()
    assert q.stats()["dropped"] == 0


def test_a_padded_device_array_with_host_lengths_fills_a_variable_length_component():
    import theano

    q = tq.Queue([("tokens", "int32", (4, tq.upto(16))), ("y", "int16", (4,))], capacity=3)
    tokens, y, lengths = q.dequeue(lengths=True)
    f = theano.function([], [tokens, y, lengths])
    wide = np.arange(4 * 20, dtype=np.int32).reshape(4, 20)
    for cut, rows in [(9, [9, 0, 3, 5]), (16, [16, 16, 1]), (4, [2, 4])]:
        gx = on_gpu(wide[: len(rows)])[:, :cut]  # padded wider than the longest row, rows strided
        q.put(tq.Padded(gx, rows), on_gpu(np.arange(len(rows), dtype=np.int16)), stream=theano_stream())
        got, gy, got_lengths = f()
        assert got.shape == (len(rows), max(rows)) and got_lengths.tolist() == rows
        assert gy.tolist() == list(range(len(rows)))
        for row, want, n in zip(got, wide, rows):
            assert np.array_equal(row[:n], want[:n])
    with pytest.raises(TypeError, match="needs its row lengths"):
        q.put(on_gpu(wide[:4, :9]), on_gpu(np.arange(4, dtype=np.int16)))
    assert q.size() == 0 and q.stats()["dropped"] == 0


@pytest.mark.parametrize("inner", ["unit", "two items", "negative"])
def test_cuda_array_interface_strides_and_stream(inner):
    """The protocol's parser: explicit byte strides (non-unit or negative innermost) and a stream."""
    q = tq.Queue([("x", "float32", (4, 6))], capacity=2)
    host = np.arange(4 * 12, dtype=np.float32).reshape(4, 12)
    g = on_gpu(host)
    if inner == "unit":  # rows of 12 of which the first 6 are the element's, strides given explicitly
        value, want = PygpuCAI(g, stream=theano_stream(), strides=(48, 4)), host[:, :6]
        value.__cuda_array_interface__["shape"] = (4, 6)
    elif inner == "two items":
        value, want = PygpuCAI(g[:, ::2], stream=theano_stream()), host[:, ::2]
    else:
        value, want = PygpuCAI(g[:, 11::-2], stream=theano_stream()), host[:, 11::-2]
    q.put(value)
    assert q.get()[0].tobytes() == np.ascontiguousarray(want).tobytes()


def test_a_batch_written_on_a_busy_stream_right_before_the_put_arrives_whole(driver):
    """Catches a copy not ordered after the producer's stream: the data lands ~100 ms late."""
    q = tq.Queue([("x", "uint32", (1 << 20,))], capacity=2)
    words, scratch_words = 1 << 20, 64 << 20
    scratch, src = driver.alloc(4 * scratch_words), driver.alloc(4 * words)
    stream = driver.stream()
    for i, how in enumerate(["cai stream", "put stream", "cai stream"]):
        value = 0x5EED0000 + i
        driver.busy_then_fill(stream, scratch, scratch_words, src, words, value)
        if how == "cai stream":
            q.put(RawCAI(src, (words,), np.uint32, stream=stream))
        else:
            q.put(RawCAI(src, (words,), np.uint32), stream=stream)
        got = q.get()[0]
        assert (got == value).all(), "%s: %d of %d words were not yet written" % (how, (got != value).sum(), words)


def test_libgpuarray_uses_the_primary_context_so_primary_context_producers_share_it(driver):
    g = on_gpu(np.zeros(4, np.float32))
    assert driver.pointer_context(g.gpudata) == driver.primary.value
    q = tq.Queue([("x", "float64", (3, 4))], capacity=2)
    host = np.arange(24, dtype=np.float64).reshape(6, 4)
    ptr = driver.upload(host)
    q.put(RawCAI(ptr, (3, 4), np.float64, strides=(64, 8)))  # strided: read by the kernel in our context
    assert q.get()[0].tolist() == host[::2].tolist()


def test_another_context_on_the_same_gpu_is_copied_when_contiguous_and_refused_when_strided(driver):
    other = driver.other_context()
    try:
        q = tq.Queue([("x", "float32", (3, 4))], capacity=2, name="ctx")
        host = np.arange(24, dtype=np.float32).reshape(6, 4)
        ptr = driver.upload(host, ctx=other)
        q.put(RawCAI(ptr, (3, 4), np.float32))
        assert q.get()[0].tolist() == host[:3].tolist()
        with pytest.raises(ValueError, match="Queue 'ctx', component 'x': a strided array from another CUDA context"):
            q.put(RawCAI(ptr, (3, 4), np.float32, strides=(32, 4)))
        assert q.size() == 0
    finally:
        driver.free()
        driver.cu.cuCtxDestroy_v2(other)


def test_wrong_dtype_shape_and_memory_are_refused_and_cost_nothing():
    q = tq.Queue(SPEC, capacity=2, name="checks")
    x, y = element(1)
    with pytest.raises(TypeError, match="component 'x': expected dtype float32, got a device array of float64"):
        q.put(on_gpu(x.astype("float64")), on_gpu(y))
    with pytest.raises(ValueError, match=r"component 'x': expected shape \(<=8, 5, 6\), got \(8, 6, 5\)"):
        q.put(on_gpu(x.transpose(0, 2, 1)), on_gpu(y))
    with pytest.raises(ValueError, match="component 'y': expected device memory of GPU 0, got an address"):
        q.put(on_gpu(x), RawCAI(y.ctypes.data, y.shape, y.dtype))
    s = q.stats()
    assert (s["enqueued"], s["dropped"], s["size"]) == (0, 0, 0)


def test_an_array_on_another_gpu_is_refused():
    import pygpu

    try:
        other = pygpu.init("cuda1")
    except Exception:
        pytest.skip("needs a second GPU")
    q = tq.Queue([("x", "float32", (4,))], name="one")
    with pytest.raises(ValueError, match="Queue 'one', component 'x': the array is on GPU 1, the queue on GPU 0"):
        q.put(pygpu.gpuarray.array(np.zeros(4, np.float32), context=other))


def test_device_and_host_producers_mixed_exactly_once_and_in_order():
    q = tq.Queue(TAGGED, capacity=4)
    real_put = q.put

    def put(data, tag):  # producer 1 puts from device memory, producer 0 from the host
        return real_put(on_gpu(data), on_gpu(tag)) if tag[0] == 1 else real_put(data, tag)

    q.put = put
    two_producers_exactly_once(q, q.get, per_producer=300)


# ---- pooled events and known allocations (issue 21): still ordered, still fresh ----------------------


def test_producers_on_two_busy_streams_each_reusing_their_buffers_arrive_whole_and_in_order(driver):
    """Three producer threads, each writing an element's two components late on two streams of its own: the
    copy stream is ordered after both with the ring's pooled events, shared by the threads, and each stream's
    next write waits for the copy (a buffer overwritten early would arrive torn).  One stream an element is
    the copy-on-the-producer's-stream path: test_a_batch_written_on_a_busy_stream_right_before_the_put_..."""
    import threading

    words, scratch_words, per_producer = 1 << 20, 16 << 20, 30
    q = tq.Queue([("x", "uint32", (words,)), ("y", "uint32", (words,))], capacity=3)
    sources = [
        [(driver.alloc(4 * words), driver.alloc(4 * scratch_words), driver.stream()) for _ in range(2)]
        for _ in range(3)
    ]
    errors = []

    def produce(producer):
        try:
            for sequence in range(per_producer):
                value = 0x5E000000 | producer << 16 | sequence
                for src, scratch, stream in sources[producer]:
                    driver.busy_then_fill(stream, scratch, scratch_words, src, words, value, rounds=20)
                q.put(*[RawCAI(src, (words,), np.uint32, stream=stream) for src, _, stream in sources[producer]])
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(3)]
    for t in threads:
        t.start()
    last = [-1, -1, -1]
    try:
        for _ in range(3 * per_producer):
            x, y = q.get(timeout=60)
            value = int(x[0])
            for got in (x, y):
                assert (got == value).all(), "a torn element: %d of %d words differ" % ((got != value).sum(), words)
            producer, sequence = (value >> 16) & 0xFF, value & 0xFFFF
            assert sequence == last[producer] + 1, "producer %d: %d after %d" % (producer, sequence, last[producer])
            last[producer] = sequence
    finally:
        q.close(cancel_pending=True)
        for t in threads:
            t.join()
    assert not errors and last == [per_producer - 1] * 3


def test_an_address_freed_and_allocated_again_in_another_context_is_asked_afresh(driver):
    other = driver.other_context()
    try:
        q = tq.Queue([("x", "float32", (3, 4))], capacity=2, name="fresh")
        host = np.arange(24, dtype=np.float32).reshape(6, 4)
        first = driver.upload(host)
        q.put(RawCAI(first, (3, 4), np.float32, strides=(32, 4)))  # strided, ours: the kernel reads it
        q.put(RawCAI(first, (3, 4), np.float32))  # known now: only its buffer ID is asked
        assert [q.get()[0].tolist() for _ in range(2)] == [host[::2].tolist(), host[:3].tolist()]
        driver.cu.cuCtxSynchronize()
        driver.check(driver.cu.cuMemFree_v2(ctypes.c_ulonglong(first)))
        driver.held = [(p, c) for p, c in driver.held if p != first]
        again = driver.upload(host[::-1].copy(), ctx=other)
        if again != first:
            pytest.skip("the driver did not hand the freed address back")
        q.put(RawCAI(again, (3, 4), np.float32))  # another context's now: copied between contexts
        assert q.get()[0].tolist() == host[::-1][:3].tolist()
        with pytest.raises(ValueError, match="Queue 'fresh', component 'x': a strided array from another CUDA"):
            q.put(RawCAI(again, (3, 4), np.float32, strides=(32, 4)))
        assert q.size() == 0 and q.stats()["dropped"] == 0
    finally:
        driver.free()
        driver.cu.cuCtxDestroy_v2(other)


def test_pygpu_puts_of_one_array_rewritten_on_theanos_stream_after_each_put_arrive_in_order():
    """Theano's stream writes the array again right after each put: it must wait for the copy on the GPU."""
    q = tq.Queue([("x", "float32", (1 << 22,))], capacity=3)
    values = [on_gpu(np.full(1 << 22, i, np.float32)) for i in range(40)]
    g = on_gpu(np.zeros(1 << 22, np.float32))
    got = []
    for i in range(40):
        g[:] = values[i]  # queued on libgpuarray's stream, after the last put's copy has read g
        q.put(g)
        if q.size() == 3:
            got.append(q.get()[0])
    got += [q.get()[0] for _ in range(q.size())]
    assert len(got) == 40
    for i, element in enumerate(got):
        assert (element == i).all(), "element %d: %d words differ" % (i, (element != i).sum())


def test_a_put_without_a_stream_returns_once_its_copy_has_read_the_array_even_when_the_copy_starts_late(driver):
    """A producer without a stream (pycuda's arrays) may overwrite its array as soon as the put returns: the
    put waits on the host, polling for as long as the copy should take, then asleep on the event.  Every
    other element is taken on a stream loaded with busy work, so that the next put's copy starts tens of
    milliseconds late: its wait outlasts the poll.  An array read after the put returned arrives torn."""
    words, scratch_words = 1 << 20, 64 << 20
    q = tq.Queue([("x", "uint32", (words,))], capacity=1)
    src, scratch = driver.alloc(4 * words), driver.alloc(4 * scratch_words)
    pending = []
    for i, late in enumerate([False, True, False, True, False]):
        value = 0xC0DE0000 + i
        driver.fill(src, words, value)
        q.put(RawCAI(src, (words,), np.uint32))  # after a late take, its copy waits for the busy work
        driver.fill(src, words, 0xDEADBEEF)  # the producer writes its array again at once
        if late:  # the element leaves on Theano's stream behind busy work: the slot's next copy starts late
            driver.busy_then_fill(theano_stream(), scratch, scratch_words, scratch, 1, 0, rounds=200)
        pending.append((q.get(device=True)[0], value))
        if not late:
            for got, want in pending:
                torn = int((got.get() != want).sum())
                assert torn == 0, "%d of %d words were overwritten before the copy read them" % (torn, words)
            pending = []


# ---- gets ---------------------------------------------------------------------------------------


def test_get_on_the_device_hands_out_cuda_array_interface_arrays():
    q = tq.Queue(SPEC, capacity=2)
    x, y = element(2, rows=5)
    q.put(x, y)
    gx, gy = q.get(device=True)
    assert gx.shape == (5, 5, 6) and gx.dtype == np.float32 and gy.shape == (5,)
    assert gx.get().tobytes() == x.tobytes() and gy.get().tobytes() == y.tobytes()
    cai = gx.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] == theano_stream() and cai["typestr"] == "<f4"
    # A device get feeds a device put: no trip through the host.
    q.put(gx, gy)
    assert q.get()[0].tobytes() == x.tobytes()


# ---- pycuda --------------------------------------------------------------------------------------


@pytest.fixture
def pycuda():
    try:
        import pycuda.autoprimaryctx  # noqa: F401  (the device's primary context: libgpuarray's too)
        import pycuda.driver
        import pycuda.gpuarray
    except Exception as exc:  # not installed, or no GPU it can use
        pytest.skip("needs pycuda with a GPU: %s" % exc)
    return pycuda


def test_pycuda_arrays_contiguous_strided_and_on_a_stream(pycuda):
    from pycuda.elementwise import ElementwiseKernel

    q = tq.Queue([("x", "float32", (64, 1000))], capacity=2)
    host = np.random.default_rng(3).standard_normal((128, 1000)).astype("float32")
    a = pycuda.gpuarray.to_gpu(host)
    q.put(a[:64])
    assert q.get()[0].tobytes() == host[:64].tobytes()
    q.put(a[::2])
    assert q.get()[0].tobytes() == host[::2].tobytes()
    # Written by a kernel on a non-default stream right before the put.
    stream = pycuda.driver.Stream()
    scale = ElementwiseKernel("float *x, float s", "x[i] = x[i] * s", "scale")
    b = a[:64].copy()
    for _ in range(50):
        scale(b, np.float32(1.0), stream=stream)
    scale(b, np.float32(3.0), stream=stream)
    q.put(b, stream=stream)
    np.testing.assert_array_equal(q.get()[0], host[:64] * np.float32(3.0))


def test_pycuda_reads_a_device_get(pycuda):
    q = tq.Queue([("x", "int32", (16,))], capacity=2)
    q.put(np.arange(16, dtype=np.int32))
    (got,) = q.get(device=True)
    cai = got.__cuda_array_interface__
    pycuda.driver.Context.synchronize()  # the data is ready on libgpuarray's stream (cai["stream"])
    view = pycuda.gpuarray.GPUArray(cai["shape"], np.int32, gpudata=cai["data"][0])
    assert view.get().tolist() == list(range(16))


def test_the_pycuda_augmentation_example_trains(pycuda):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # The example is a program of its own: it takes the GPU itself (Theano
    # refuses a child of a process that has it, by this variable).
    env = {k: v for k, v in os.environ.items() if k != "THEANO_GPU_IS_ALREADY_ACTIVE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "examples", "gpu_augment.py"), "--steps", "300"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    last = [line for line in done.stdout.splitlines() if line.startswith("step  300")]
    assert last and float(last[0].split()[-1]) > 0.8, done.stdout
