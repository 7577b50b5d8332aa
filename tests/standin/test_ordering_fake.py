"""The CUDA backend's orderings, against a stand-in driver whose streams run their work later, on threads of their
own, with random pauses (tests/c/fake_libcuda_streams.c, FAKE_CUDA_ASYNC): as on a GPU, a copy reads its source when
it runs, not when it is queued, and the consumer's stream is one more queue, which its steps keep behind the ring.

A producer thread runs a ring of two slots ahead of a consumer that takes, lends or reads every element. Each element
must arrive whole and in order, from every kind of producer (staged puts small and large, the putter thread's, held and
batch-copied rows, device arrays on the producer's own stream). A missing wait shows as an element with another's
values: the producer overwriting a staging whose upload has not run, an upload or gather overwriting a slot its last
reader has not read, a reader not waiting for the fill. With synchronous streams none of these can show."""

import pytest
from fake_cuda import fake_cuda  # noqa: F401  (a fixture)
from test_device_fake import fake, run  # noqa: F401  (fake is a fixture)

PRELUDE = """
import ctypes, threading
assert driver.cuInit(0) == 0
assert driver.cuCtxPushCurrent_v2(ctypes.c_void_p(PRIMARY)) == 0
handle = ctypes.c_void_p()
assert driver.cuStreamCreate(ctypes.byref(handle), 1) == 0  # the consumer's stream: a queue of its own
STREAM = handle.value
N, ROWS, WIDTH = 120, 4, 16
scratch = [device_copy(np.zeros(256, np.uint8)) for _ in range(2)]
def step():  # the training step the consumer's stream runs after each take: the stream lags behind the ring
    for _ in range(4):
        assert driver.cuMemcpyDtoDAsync_v2(ctypes.c_ulonglong(scratch[0].ctypes.data), ctypes.c_ulonglong(
            scratch[1].ctypes.data), ctypes.c_size_t(256), ctypes.c_void_p(STREAM)) == 0
def two_component_ring():  # x: ROWS x WIDTH float32, y: ROWS int64, two slots
    return gpu_ring([("x", "float32", (ROWS, WIDTH)), ("y", "int64", (ROWS,))], capacity=2)
def filled(i):  # element i of the producers that make their arrays: x all i, y all -i
    return [np.full((ROWS, WIDTH), i, np.float32), np.full(ROWS, -i, np.int64)]
def all_as_expected(outs):  # outs[i]: element i's arrays, as the consumer's stream left them
    for i in range(N):
        for got, want in zip(outs[i], expected(i)):
            assert (np.asarray(got) == want).all(), (i, got.ravel()[:4], want.ravel()[:4])
def finish():  # the consumer's stream has done what it was given
    assert driver.cuStreamSynchronize(ctypes.c_void_p(STREAM)) == 0
def view(address, shape, dtype):
    raw = (ctypes.c_ubyte * int(np.prod(shape) * np.dtype(dtype).itemsize)).from_address(address)
    return np.ctypeslib.as_array(raw).view(dtype).reshape(shape).copy()
def produce(put):
    failures = []
    def loop():
        try:
            for i in range(N):
                put(i)
        except BaseException as e:  # the consumer's next wait raises it
            failures.append(e)
            ring.fail(e)
    thread = threading.Thread(target=loop)
    thread.start()
    return thread, failures
"""


def rows_of_a_dataset(mechanism):
    """Element i: rows order[4i:4i+4] of a dataset the device copies itself, by `mechanism`."""
    return """
ring, comps = two_component_ring()
X = np.arange(N * ROWS * WIDTH, dtype=np.float32).reshape(N * ROWS, WIDTH)
Y = np.arange(N * ROWS, dtype=np.int64) * 10
order = np.random.RandomState(0).permutation(N * ROWS).astype(np.int64)
assert ring.gather_on_device([X, Y], %r) == %r
def put(i):
    assert ring.put_rows([X, Y], order, ROWS, i, 1) == 1
def expected(i):
    rows = order[ROWS * i : ROWS * i + ROWS]
    return [X[rows], Y[rows]]
""" % (mechanism, mechanism)


# Each producer defines the ring, put(i) (in the producer's thread) and expected(i), element i's arrays.
PRODUCERS = {
    # element i: x all i, y all -i, copied into the staging by the put
    "staged": """
ring, comps = two_component_ring()
expected = filled
def put(i):
    ring.put(filled(i))
""",
    # the same, 2.5 MB an element: the producer queues its upload itself
    "large": """
N, WIDTH = 16, 160000
ring, comps = two_component_ring()
expected = filled
def put(i):
    ring.put(filled(i))
""",
    # given to the ring's putter thread, which copies it into the staging after the put returns
    "given": """
ring, comps = two_component_ring()
expected = filled
def put(i):
    ring.put_given([filled(i)])
    if i == N - 1:
        ring.flush_given()
""",
    # a dataset held in device memory, gathered on the device by a kernel
    "held": rows_of_a_dataset("device"),
    # the same rows copied by the device from page-locked host memory (cuMemcpyBatchAsync)
    "batch": rows_of_a_dataset("batch"),
    # device arrays written on a producer's own queued stream, one buffer reused: the ring's copy must be
    # ordered after the write, and the next write after the copy
    "device": """
from fake_device import put as put_device_arrays
ring, comps = two_component_ring()
made = ctypes.c_void_p()
assert driver.cuStreamCreate(ctypes.byref(made), 1) == 0
PRODUCER = made.value
sources = [device_copy(np.zeros((ROWS, WIDTH), np.float32)), device_copy(np.zeros(ROWS, np.int64))]
written = []  # the host arrays the producer's queued writes read, kept until they ran
expected = filled
def put(i):
    if i == 0:
        assert driver.cuCtxPushCurrent_v2(ctypes.c_void_p(PRIMARY)) == 0  # the producer thread's context
    for source, host in zip(sources, filled(i)):
        written.append(host)
        assert driver.cuMemcpyHtoDAsync_v2(ctypes.c_ulonglong(source.ctypes.data), host.ctypes.data_as(ctypes.c_void_p),
                                           ctypes.c_size_t(host.nbytes), ctypes.c_void_p(PRODUCER)) == 0
    put_device_arrays(ring, comps, [CAI(s, stream=PRODUCER) for s in sources])
    if i == N - 1:
        driver.cuCtxPopCurrent_v2(None)
""",
}

CONSUMERS = {
    # every element into memory of its own, checked once the stream is done: the ring runs ahead meanwhile
    "take": """
outs = [[device_copy(np.zeros((ROWS, WIDTH), np.float32)), device_copy(np.zeros(ROWS, np.int64))] for _ in range(N)]
thread, failures = produce(put)
for i in range(N):
    assert ring.take_device([o.ctypes.data for o in outs[i]], STREAM) == (ROWS, ROWS)
    step()
thread.join()
finish()
all_as_expected(outs)
""",
    # each element lent, read once the stream is done, then given back
    "lend": """
dsts = [device_copy(np.zeros((ROWS, WIDTH), np.float32)), device_copy(np.zeros(ROWS, np.int64))]
thread, failures = produce(put)
for i in range(N):
    rows, lease, where = ring.lend_device([d.ctypes.data for d in dsts], STREAM)
    finish()
    got = [view(where[0], (ROWS, WIDTH), np.float32), view(where[1], (ROWS,), np.int64)]
    del lease
    for g, want in zip(got, expected(i)):
        assert (g == want).all(), (i, g.ravel()[:4], want.ravel()[:4])
thread.join()
""",
    # each element lent, read on the consumer's stream as a step would, and given back at once, long before the
    # stream has read it: the ring must not write the block again until the stream is done with it
    "lend-read-later": """
outs = [[device_copy(np.zeros((ROWS, WIDTH), np.float32)), device_copy(np.zeros(ROWS, np.int64))] for _ in range(N)]
sizes = [ROWS * WIDTH * 4, ROWS * 8]
dsts = [device_copy(np.zeros((ROWS, WIDTH), np.float32)), device_copy(np.zeros(ROWS, np.int64))]
thread, failures = produce(put)
for i in range(N):
    rows, lease, where = ring.lend_device([d.ctypes.data for d in dsts], STREAM)
    for out, at, size in zip(outs[i], where, sizes):
        assert driver.cuMemcpyDtoDAsync_v2(ctypes.c_ulonglong(out.ctypes.data), ctypes.c_ulonglong(at),
                                           ctypes.c_size_t(size), ctypes.c_void_p(STREAM)) == 0
    step()
    del lease
thread.join()
finish()
all_as_expected(outs)
""",
    # each element read to the host: the copy stream's own readers
    "get": """
thread, failures = produce(put)
for i in range(N):
    for got, want in zip(ring.get(), expected(i)):
        assert (got == want).all(), (i, got.ravel()[:4], want.ravel()[:4])
thread.join()
""",
}

ENDING = """
assert not failures, failures
del ring
if "PRODUCER" in globals():
    assert driver.cuStreamDestroy_v2(ctypes.c_void_p(PRODUCER)) == 0
assert driver.cuStreamDestroy_v2(ctypes.c_void_p(STREAM)) == 0
driver.cuCtxPopCurrent_v2(None)
"""


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_every_element_arrives_whole_and_in_order_when_streams_run_later(fake, producer, consumer):  # noqa: F811
    body = PRELUDE + PRODUCERS[producer] + CONSUMERS[consumer]
    run(fake, body + ENDING, FAKE_CUDA_ASYNC="300")


# A driver call that fails mid-run (three times, or until the 40th take), in the producer's put or the consumer's
# take: each failure raises naming the call, and every element the consumer does get is its own (never another's,
# never out of order), up to the last one.
FAULTS = """
import os
N = 60
outs = [device_copy(np.zeros((ROWS, WIDTH), np.float32)) for _ in range(N + 10)]  # a failed take may come again
ring, comps = gpu_ring([("x", "float32", (ROWS, WIDTH))], capacity=3)
if KIND == "held":
    X = np.arange(N * ROWS * WIDTH, dtype=np.float32).reshape(N * ROWS, WIDTH)
    order = np.random.RandomState(0).permutation(N * ROWS).astype(np.int64)
    assert ring.gather_on_device([X], "device") == "device"
    def expected(i):
        return X[order[ROWS * i : ROWS * i + ROWS]]
    def put(i):
        ring.put_rows([X], order, ROWS, i, 1)
else:
    def expected(i):
        return np.full((ROWS, WIDTH), i, np.float32)
    def put(i):
        ring.put([expected(i)])
errors, failures = [], []
failing = {}
def stop_failing():  # how many times the call was made while it failed
    if os.environ.pop("FAKE_CUDA_FAIL", None):
        failing["calls"] = driver.fake_cuda_calls(CALL.encode()) - failing["before"]
def failed(e):  # the call fails three times, in either thread, then works again
    errors.append(e)
    if len(errors) >= 3:
        stop_failing()
def produce_all():
    for i in range(N):
        try:
            put(i)
        except CudaError as e:  # a put that fails drops its element; the next goes on
            failed(e)
thread = threading.Thread(target=produce_all)
thread.start()
taken, k = [], 0
while thread.is_alive() or ring.size():  # until the producer is done and the ring empty
    if k == 20 and not errors and "FAKE_CUDA_FAIL" not in os.environ:
        failing["before"] = driver.fake_cuda_calls(CALL.encode())
        os.environ["FAKE_CUDA_FAIL"] = CALL
    if k == 40:
        stop_failing()  # at the latest: the elements after it all arrive
    try:
        ring.take_device([outs[k].ctypes.data], STREAM, timeout=0.5)
        taken.append(k)
    except QueueTimeout:
        continue
    except CudaError as e:
        failed(e)
    k += 1
thread.join()
finish()
stop_failing()  # a failure the backend gets over: it never raised
assert failing["calls"] > 0, "the call never failed"
assert all(CALL.split("_v2")[0] in str(e) for e in errors), errors
arrived = []
for k in taken:
    which = [i for i in range(N) if (np.asarray(outs[k]) == expected(i)).all()]
    assert which, ("an element that is no element", k, np.asarray(outs[k]).ravel()[:4])
    arrived.append(which[0])
assert arrived == sorted(set(arrived)) and arrived[-1] == N - 1, arrived
"""

FAILING_CALLS = [
    ("staged", "cuMemcpyHtoDAsync_v2"),
    ("staged", "cuEventRecord"),
    ("staged", "cuStreamWaitEvent"),
    ("staged", "cuMemcpyDtoDAsync_v2"),
    ("staged", "cuEventSynchronize"),
    ("held", "cuLaunchKernel"),
    ("held", "cuEventRecord"),  # the consumer's record for the row numbers: it waits for its stream instead
    ("held", "cuEventSynchronize"),
]


@pytest.mark.parametrize("kind,call", FAILING_CALLS)
def test_a_call_that_fails_mid_run_never_lets_an_element_be_read_as_another(fake, kind, call):  # noqa: F811
    body = (
        "KIND, CALL = %r, %r\nfrom theano_queue.core.errors import CudaError, QueueTimeout\n" % (kind, call)
        + PRELUDE
        + FAULTS
    )
    run(fake, body + ENDING, FAKE_CUDA_ASYNC="300")
