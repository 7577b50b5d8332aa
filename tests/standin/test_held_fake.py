"""A small batch of a dataset held in device memory is gathered by its consumer (c_code/engine/cuda/tq_cuda_held.c),
against the stand-in driver (tests/c/fake_libcuda.c, whose "device memory" is host memory it knows): the
producer's put makes no driver call but its wait for the slot, the consumer's lend gathers the batch on its own
stream straight into the block it is lent, every component in one kernel that reads the row numbers where the
host wrote them, its take straight into the memory it gives, a read to the host
gathers into the slot first, a detach gathers what is still left before it frees the held memory, and a larger
batch is gathered by the producer on the copy stream.  tests/gpu/test_gpu_held.py runs the same on the GPU."""

import textwrap

from fake_cuda import fake_cuda  # noqa: F401  (a fixture)
from test_device_fake import fake, run  # noqa: F401  (fake is a fixture)

# A held dataset of 20 rows, a ring of two slots of batches of 4, element views over the stand-in's memory.
PRELUDE = """
import ctypes
def view(address, like):
    raw = (ctypes.c_ubyte * like.nbytes).from_address(address)
    return np.ctypeslib.as_array(raw).view(like.dtype).reshape(like.shape)
ring, comps = gpu_ring([("x", "float32", (4, 3)), ("y", "int64", (4,))], capacity=2)
X = np.arange(60, dtype=np.float32).reshape(20, 3)
Y = np.arange(20, dtype=np.int64) * 10
order = np.array([7, 2, 19, 11, 0, 5, 13, 8, 3, 16, 1, 9, 4, 18, 6, 12], dtype=np.int64)
def batch(k):
    return [X[order[4 * k : 4 * k + 4]], Y[order[4 * k : 4 * k + 4]]]
def put(k):
    done = ring.put_rows([X, Y], order, 4, k, 1)
    assert done == 1, (k, done, ring.size())
outs = [device_copy(np.zeros((4, 3), np.float32)), device_copy(np.zeros(4, np.int64))]
dsts = [o.ctypes.data for o in outs]
STREAM = 77  # the consumer's stream, as Theano's is
assert ring.gather_on_device([X, Y], "device") == "device"
"""


def body(text):
    return PRELUDE + textwrap.dedent(text)


def test_the_put_makes_no_driver_call_and_the_lend_gathers_on_the_consumers_stream(fake):  # noqa: F811
    run(
        fake,
        body(
            """
        log()
        put(0)
        assert log() == ["sync"]  # the slot's last reader waited for: nothing queued, no kernel
        rows, lease, where = ring.lend_device(dsts, STREAM)
        calls = log()
        # One kernel for both components, reading the row numbers where the host staged them (no upload),
        # and one record for the producer: on the consumer's stream, no wait for another stream's event (a
        # spare never lent before has no reader to wait for).
        assert calls == ["kernel %d" % STREAM, "record %d" % STREAM], calls
        assert rows == (4, 4) and lease is not None and where[0] not in dsts
        assert [view(w, x).tolist() for w, x in zip(where, batch(0))] == [x.tolist() for x in batch(0)]
        # The slot keeps its block and goes back at once; the lent block is not written by the next puts.
        put(1)
        put(2)
        assert [view(w, x).tolist() for w, x in zip(where, batch(0))] == [x.tolist() for x in batch(0)]
        rows, second, where2 = ring.lend_device(dsts, STREAM)
        assert second is not None and [view(w, x).tolist() for w, x in zip(where2, batch(1))] == [
            x.tolist() for x in batch(1)
        ]
        # Both spares lent: the third batch is gathered straight into the consumer's memory.
        log()
        rows, third, where3 = ring.lend_device(dsts, STREAM)
        assert third is None and list(where3) == dsts
        assert log() == ["kernel %d" % STREAM, "record %d" % STREAM]
        assert [o.tolist() for o in outs] == [x.tolist() for x in batch(2)]
        # A spare given back on this stream is lent again without a wait: the stream keeps the order.
        del lease
        log()
        put(0)
        rows, again, where4 = ring.lend_device(dsts, STREAM)
        assert "wait %d" % STREAM not in log()
        assert [view(w, x).tolist() for w, x in zip(where4, batch(0))] == [x.tolist() for x in batch(0)]
        # Given back on another stream, the next borrower waits for it.
        del again
        put(1)
        rows, other, where5 = ring.lend_device(dsts, STREAM + 1)
        assert "wait %d" % (STREAM + 1) in log()
        assert ring.stats()["dequeued"] == 5 and ring.stats()["lent"] == 4
        del second, other
        ring.gather_on_host()
        del ring
    """
        ),
    )


def test_a_take_gathers_into_the_consumers_memory_and_a_get_into_the_slot(fake):  # noqa: F811
    run(
        fake,
        body(
            """
        put(0)
        put(1)
        log()
        assert ring.take_device(dsts, STREAM) == (4, 4)
        assert log() == ["kernel %d" % STREAM, "record %d" % STREAM]
        assert [o.tolist() for o in outs] == [x.tolist() for x in batch(0)]
        got = ring.get()  # to the host: gathered into the slot on the copy stream first, then read back
        assert [g.tolist() for g in got] == [x.tolist() for x in batch(1)]
        # The producer of a slot its consumer gathered from waits for that gather's record, once.
        log()
        put(2)
        put(3)
        assert log() == ["sync", "sync"]
        assert [g.tolist() for g in ring.get()] == [x.tolist() for x in batch(2)]
        assert [g.tolist() for g in ring.get()] == [x.tolist() for x in batch(3)]
        ring.gather_on_host()
        del ring
    """
        ),
    )


def test_a_detach_gathers_what_is_still_left_before_it_frees_the_held_memory(fake):  # noqa: F811
    run(
        fake,
        body(
            """
        put(0)
        put(1)
        ring.gather_on_host()  # the Feeder's run ends with two batches unread
        X[:] = -1  # the host arrays may change once the run is over: the batches were gathered before
        expected = [np.arange(60, dtype=np.float32).reshape(20, 3), Y]
        for k in (0, 1):
            rows = order[4 * k : 4 * k + 4]
            got = ring.get()
            assert [g.tolist() for g in got] == [expected[0][rows].tolist(), Y[rows].tolist()]
        del ring
    """
        ),
    )


def test_a_batch_above_the_bound_is_gathered_by_the_producer_on_the_copy_stream(fake):  # noqa: F811
    run(
        fake,
        body(
            """
        was = _engine.set_held_gather_in_step(0)
        try:
            log()
            put(0)
            calls = log()
            assert [c.split()[0] for c in calls] == ["sync", "wait", "upload", "kernel", "record"]
            assert all(c.split()[1:] != [str(STREAM)] for c in calls), calls  # none on the consumer's stream
            rows, lease, where = ring.lend_device(dsts, STREAM)
            assert log() == ["wait %d" % STREAM]  # the lend of a gathered slot: one wait for its filled event
            assert [view(w, x).tolist() for w, x in zip(where, batch(0))] == [x.tolist() for x in batch(0)]
            del lease
        finally:
            _engine.set_held_gather_in_step(was)
        ring.gather_on_host()
        del ring
    """
        ),
    )


def test_a_failed_gather_on_the_consumers_stream_raises_naming_the_call_and_the_next_batch_arrives(fake):  # noqa: F811
    run(
        fake,
        body(
            """
        import os
        from theano_queue.core.errors import QueueError
        put(0)
        os.environ["FAKE_CUDA_FAIL"] = "cuLaunchKernel"
        with pytest.raises(QueueError, match="cuLaunchKernel"):
            ring.lend_device(dsts, STREAM)
        del os.environ["FAKE_CUDA_FAIL"]
        put(1)
        rows, lease, where = ring.lend_device(dsts, STREAM)
        assert [view(w, x).tolist() for w, x in zip(where, batch(1))] == [x.tolist() for x in batch(1)]
        del lease
        ring.gather_on_host()
        del ring
    """
        ),
    )


def test_a_lend_pushes_no_context_where_the_rings_is_already_current(fake):  # noqa: F811
    # GpuDequeue holds the ring's context across its call (hold_device); the lend, the consumer's gather in it
    # and the give-back of the block then push and pop nothing: each pair costs the driver microseconds.
    run(
        fake,
        body(
            """
        driver.fake_cuda_calls.argtypes = [ctypes.c_char_p]
        pushes = lambda: driver.fake_cuda_calls(b"cuCtxPushCurrent_v2")
        put(0)
        before = pushes()
        rows, lease, where = ring.lend_device(dsts, STREAM)  # no context current: the ring's is pushed
        assert lease is not None and pushes() > before
        del lease
        put(1)
        assert driver.cuCtxPushCurrent_v2(ctypes.c_void_p(PRIMARY)) == 0
        before = pushes()
        rows, lease, where = ring.lend_device(dsts, STREAM)
        assert lease is not None
        assert [view(w, x).tolist() for w, x in zip(where, batch(1))] == [x.tolist() for x in batch(1)]
        del lease
        assert pushes() == before
        current = ctypes.c_void_p()
        assert driver.cuCtxGetCurrent(ctypes.byref(current)) == 0 and current.value == PRIMARY  # still ours
        driver.cuCtxPopCurrent_v2(None)
        assert driver.cuCtxGetCurrent(ctypes.byref(current)) == 0 and not current.value  # and nothing left pushed
        """
        ),
    )


def test_a_batch_of_many_components_is_gathered_by_one_kernel_for_every_eight(fake):  # noqa: F811
    # A launch costs the consumer's thread microseconds: components share one, up to the kernel's eight parts.
    run(
        fake,
        """
import ctypes
def view(address, like):
    raw = (ctypes.c_ubyte * like.nbytes).from_address(address)
    return np.ctypeslib.as_array(raw).view(like.dtype).reshape(like.shape)
dtypes = ["float32", "int64", "uint8", "int16", "float64", "int32", "uint8", "float32", "int64", "int16"]
ring, comps = gpu_ring([("c%d" % k, t, (4, k % 3 + 1)) for k, t in enumerate(dtypes)], capacity=2)
sources = [(np.arange(20 * (k % 3 + 1)) * (k + 1)).astype(t).reshape(20, k % 3 + 1) for k, t in enumerate(dtypes)]
order = np.array([7, 2, 19, 11, 0, 5, 13, 8], dtype=np.int64)
assert ring.gather_on_device(sources, "device") == "device"
outs = [device_copy(np.zeros((4, k % 3 + 1), t)) for k, t in enumerate(dtypes)]
assert ring.put_rows(sources, order, 4, 0, 1) == 1
log()
rows, lease, where = ring.lend_device([o.ctypes.data for o in outs], 77)
assert log() == ["kernel 77", "kernel 77", "record 77"]
assert [view(w, s[:4]).tolist() for w, s in zip(where, sources)] == [s[order[:4]].tolist() for s in sources]
del lease
ring.gather_on_host()
del ring
""",
    )


def test_without_the_row_numbers_mapped_for_the_device_the_consumer_uploads_them_first(fake):  # noqa: F811
    # A driver that cannot map the page-locked row numbers (cuMemHostGetDevicePointer fails) still gathers
    # every batch right: its consumer copies the row numbers up on its stream before the kernel.
    attach = 'assert ring.gather_on_device([X, Y], "device") == "device"'
    prelude = PRELUDE.replace(
        attach,
        "import os\nos.environ['FAKE_CUDA_FAIL'] = 'cuMemHostGetDevicePointer_v2'\n"
        + attach
        + "\ndel os.environ['FAKE_CUDA_FAIL']",
    )
    assert prelude != PRELUDE
    run(
        fake,
        prelude
        + textwrap.dedent(
            """
        put(0)
        log()
        rows, lease, where = ring.lend_device(dsts, STREAM)
        assert log() == ["upload %d" % STREAM, "kernel %d" % STREAM, "record %d" % STREAM]
        assert [view(w, x).tolist() for w, x in zip(where, batch(0))] == [x.tolist() for x in batch(0)]
        del lease
        ring.gather_on_host()
        del ring
    """
        ),
    )
