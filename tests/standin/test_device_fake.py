"""Device-array puts through the CUDA backend against the stand-in driver
(tests/c/fake_libcuda.c, whose "device memory" is host memory it knows): the
protocols' parsing, the strided layouts, the stream ordering, the checks and
the clean-up, on a machine without a GPU.  tests/gpu/test_device_arrays.py runs
the same on the GPU.  Also who starts a host put's upload: the put, or the
consumer's next take (tests/gpu/test_gpu.py runs that on the GPU)."""

import os
import subprocess
import sys
import textwrap

import pytest
from fake_cuda import NOTHING_HELD, ROOT, fake_cuda, held  # noqa: F401  (fake_cuda is a fixture)

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")  # the helper modules


def run(fake, body, **env):
    """Runs body after `from fake_device import *` in a process that loads the stand-in; its stdout."""
    script = (
        "from fake_device import *\nfrom theano_queue import _engine\nimport numpy as np, pytest\n"
        + textwrap.dedent(body)
        + "\nfree_device_memory()\n"
    )
    environment = dict(
        os.environ,
        **fake,
        PYTHONPATH=os.pathsep.join(filter(None, [ROOT, SUPPORT, os.environ.get("PYTHONPATH")])),
        **env,
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert held(fake) == NOTHING_HELD
    return done.stdout


@pytest.fixture
def fake(fake_cuda, tmp_path):  # noqa: F811
    return dict(fake_cuda, FAKE_CUDA_LOG=str(tmp_path / "calls"))


def test_contiguous_and_strided_layouts_arrive_bit_exact(fake):
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (4, 6)), ("y", "int16", (4,)), ("z", "complex128", (4, 2))])
        base = np.arange(8 * 6 * 2, dtype=np.float32).reshape(8, 6, 2)
        x_dev = device_copy(base)
        y_dev = device_copy(np.arange(12, dtype=np.int16))
        z_dev = device_copy((np.arange(32) + 1j * np.arange(32)).reshape(4, 8))
        layouts = [
            (x_dev[:4, :, 0], y_dev[:4], z_dev[:, :2]),              # inner stride 8 bytes, strided rows
            (x_dev[::2, :, 1], y_dev[::3], z_dev[:, ::4]),            # every axis strided
            (x_dev[7:3:-1, ::-1, 0], y_dev[::-3], z_dev[::-1, 1::-1]),  # negative strides, the innermost too
            (device_copy(np.ascontiguousarray(x_dev[:4, :, 0])), y_dev[4:8], device_copy(z_dev[:, :2].copy())),
        ]
        for x, y, z in layouts:
            put(ring, comps, [CAI(x, stream=1), CAI(y), CAI(z)])
            gx, gy, gz = ring.get()
            assert gx.tobytes() == np.ascontiguousarray(x).tobytes()
            assert gy.tobytes() == np.ascontiguousarray(y).tobytes()
            assert gz.tobytes() == np.ascontiguousarray(z).tobytes()
        calls = log()
        assert calls.count("kernel %s" % calls[1].split()[1]) >= 7  # the strided ones went through the kernel
        assert ring.stats()["enqueued"] == 4 and ring.stats()["dropped"] == 0
    """,
    )


def test_a_partial_batch_an_empty_one_a_single_row_and_a_scalar(fake):
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "uint8", (5, 3)), ("s", "float64", ())], capacity=4)
        x = device_copy(np.arange(30, dtype=np.uint8).reshape(10, 3))
        s = device_copy(np.array([2.5, -1.0]))
        put(ring, comps, [CAI(x[1:4]), CAI(s[0, ...])])
        put(ring, comps, [CAI(x[:0]), CAI(s[1, ...])])
        put(ring, comps, [CAI(x[7:8, ::-1]), CAI(s[0, ...])])
        got = [ring.get() for _ in range(3)]
        assert got[0][0].tolist() == x[1:4].tolist() and got[0][1] == 2.5
        assert got[1][0].shape == (0, 3) and got[1][1] == -1.0
        assert got[2][0].tolist() == x[7:8, ::-1].tolist()
    """,
    )


def test_the_copy_is_ordered_after_the_producers_stream_and_the_stream_after_the_copy(fake):
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (2, 3))])
        copy = ring.copy_stream
        x = device_copy(np.ones((2, 3), np.float32))
        log()
        put(ring, comps, [CAI(x, stream=777)])
        # One producer stream of the ring's context: the copy is queued on it, after the slot's last reader,
        # and records filled; the stream's next writes follow the copy.  No host wait.
        assert log() == ["wait 777", "copy 777", "record 777"]
        ring.get()
        log()
        two, two_comps = gpu_ring([("x", "float32", (2, 3)), ("y", "float32", (2, 3))])
        put(two, two_comps, [CAI(x, stream=777), CAI(x, stream=778)])
        # Two streams: the copy stream waits for what each has queued, and for the slot's last reader,
        # copies, records filled; then each stream waits for that.
        other_copy = two.copy_stream
        assert log() == ["record 777", "wait %d" % other_copy, "record 778", "wait %d" % other_copy,
                         "wait %d" % other_copy, "copy %d" % other_copy, "copy %d" % other_copy,
                         "record %d" % other_copy, "wait 777", "wait 778"]
        assert [a.tolist() for a in two.get()] == [x.tolist(), x.tolist()]
        log()
        put(ring, comps, [CAI(x, stream=None)])  # pycuda's "data is ready": the put waits for the copy
        assert log() == ["wait %d" % copy, "copy %d" % copy, "record %d" % copy, "query"]  # done: no sleep
        ring.get()
        log()
        put(ring, comps, [CAI(x, stream=None)], stream=555)  # the put's stream= for arrays that carry none
        assert log() == ["wait 555", "copy 555", "record 555"] and log() == []
        ring.get()
        put(ring, comps, [CAI(x, stream=2, version=2)], stream=None)  # before v3 there is no stream field
        assert log()[-1] == "query"
    """,
    )


def test_dlpack_producers_are_given_the_copy_stream(fake):
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "int32", (3, 4))])
        x = device_copy(np.arange(24, dtype=np.int32).reshape(6, 4))
        producer = CudaDLPack(x[::2, ::-1])
        put(ring, comps, [producer])
        assert producer.streams == [ring.copy_stream]
        assert ring.get()[0].tolist() == x[::2, ::-1].tolist()
        owner, ptr, shape, strides, typestr, kind, ordinal = _engine.dlpack_source(x[1:, 1::2].__dlpack__())
        assert (ptr, shape, strides, typestr, kind) == (x[1:, 1::2].ctypes.data, (5, 2), (16, 8), "i4", 1)
        del owner  # the producer's deleter runs
        with pytest.raises(TypeError, match="CUDA host"):
            put(ring, comps, [CudaDLPack(x[:3], device_type=3)])
        with pytest.raises(TypeError, match="capsule"):
            _engine.dlpack_source(object())
    """,
    )


def test_bad_input_is_refused_clearly_and_costs_the_queue_nothing(fake):
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (4, 3))], name="train")
        good = device_copy(np.zeros((4, 3), np.float32))
        cases = [
            (CAI(device_copy(np.zeros((4, 3), np.float64))), TypeError,
             "Queue 'train', component 'x': expected dtype float32, got a device array of float64"),
            (CAI(device_copy(np.zeros((4, 4), np.float32))), ValueError,
             "expected shape \\\\(<=4, 3\\\\), got \\\\(4, 4\\\\)"),
            (CAI(device_copy(np.zeros((4, 3), np.float32), context=0x1001)), ValueError,
             "component 'x': the array is on GPU 1, the queue on GPU 0"),
            (CAI(np.zeros((4, 3), np.float32)), ValueError, "expected device memory of GPU 0, got an address the CUDA"),
            (CAI(device_copy(np.zeros((4, 6), np.float32), context=OTHER_CONTEXT)[:, ::2]), ValueError,
             "strided array from another CUDA context"),
            (CAI(good, stream=0), ValueError, "stream 0 is ambiguous"),
        ]
        for value, error, message in cases:
            with pytest.raises(error, match=message):
                put(ring, comps, [value], name="train")  # the dtype by the schema (Python), the rest by the engine
        with pytest.raises(TypeError, match="stream must be None, a CUstream handle"):
            put(ring, comps, [CAI(good)], stream="default")
        s = ring.stats()
        assert (s["enqueued"], s["dropped"], s["size"]) == (0, 0, 0)
        put(ring, comps, [CAI(good)])
        assert ring.size() == 1
    """,
        FAKE_CUDA_DEVICES="2",
    )


def test_another_context_on_the_same_gpu_is_copied_between_contexts(fake):
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (4, 3))])
        x = device_copy(np.arange(12, dtype=np.float32).reshape(4, 3), context=OTHER_CONTEXT)
        log()
        put(ring, comps, [CAI(x)])
        assert any(line.startswith("peer") for line in log())
        assert ring.get()[0].tolist() == x.tolist()
    """,
    )


def test_a_ring_that_gathers_on_the_device_takes_strided_device_puts_too(fake):
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (4, 6)), ("y", "int16", (4,))])
        x = device_copy(np.arange(8 * 6, dtype=np.float32).reshape(8, 6))
        y = device_copy(np.arange(8, dtype=np.int16))
        put(ring, comps, [CAI(x[::2, ::-1]), CAI(y[::2])])
        data = [np.arange(10 * 6, dtype=np.float32).reshape(10, 6) + 0.5, np.arange(10, dtype=np.int16) * 3]
        assert ring.gather_on_device(data, "batch") == "batch"
        rows = np.array([7, 0, 9, 2, 2, 5, 1, 8], dtype=np.int64)
        assert ring.put_rows(data, rows, 4, 0, 1) == 1
        got = [ring.get() for _ in range(2)]
        put(ring, comps, [CAI(x[7:3:-1, ::-1]), CAI(y[::-2])])
        assert ring.put_rows(data, rows, 4, 1, 1) == 1
        got += [ring.get() for _ in range(2)]
        expected = [(x[::2, ::-1], y[::2]), (data[0][rows[:4]], data[1][rows[:4]]),
                    (x[7:3:-1, ::-1], y[::-2]), (data[0][rows[4:]], data[1][rows[4:]])]
        for (gx, gy), (ex, ey) in zip(got, expected):
            assert gx.tobytes() == np.ascontiguousarray(ex).tobytes()
            assert gy.tobytes() == np.ascontiguousarray(ey).tobytes()
        calls = log()
        assert sum(line.startswith("kernel") for line in calls) >= 4  # the strided puts, both components each
        assert sum(line.startswith("batch") for line in calls) == 2  # one batch copy per gathered element
        ring.gather_on_host()
    """,
    )


def test_after_a_device_gather_attached_small_arrays_gets_into_fresh_memory_still_work(fake):
    # Page-locked exactly, the dataset leaves the heap buffers around it alone: the stand-in, as the driver,
    # refuses a device-to-host copy into a buffer that starts in page-locked memory and ends past it.
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (8, 300)), ("i", "int64", (8,))], capacity=3)
        for attempt in range(20):
            data = [np.random.default_rng(attempt).standard_normal((50, 300)).astype(np.float32),
                    np.arange(50, dtype=np.int64)]
            assert ring.gather_on_device(data, "batch") == "batch"
            order = np.random.default_rng(attempt).permutation(50)
            kept = []
            for first in range(0, 6, 2):
                assert ring.put_rows(data, order, 8, first, 2) == 2
                for _ in range(2):
                    kept.append(ring.get())  # fresh numpy memory, next to the dataset's on the heap
            for b, (gx, gi) in enumerate(kept):
                picked = order[8 * b:8 * (b + 1)]
                assert gx.tobytes() == data[0][picked].tobytes() and gi.tolist() == picked.tolist()
            ring.gather_on_host()
    """,
    )


@pytest.mark.parametrize("failing", ["cuMemcpyDtoDAsync_v2", "cuLaunchKernel", "cuEventRecord"])
def test_a_failed_copy_drops_its_slot_and_the_queue_goes_on(fake, failing):
    run(
        fake,
        """
        import os
        from theano_queue.core.errors import CudaError
        ring, comps = gpu_ring([("x", "float32", (4, 3))])
        x = device_copy(np.arange(24, dtype=np.float32).reshape(8, 3))
        os.environ["FAKE_CUDA_FAIL"] = "%s"
        with pytest.raises(CudaError, match="%s"):
            put(ring, comps, [CAI(x[:4] if "Launch" not in "%s" else x[::2], stream=9)])
        del os.environ["FAKE_CUDA_FAIL"]
        s = ring.stats()
        assert (s["enqueued"], s["dropped"], s["size"]) == (0, 1, 0)
        put(ring, comps, [CAI(x[4:])])
        assert ring.get()[0].tolist() == x[4:].tolist()
    """
        % (failing, failing[:-3] if failing.endswith("_v2") else failing, failing),
    )


def test_device_gets_and_puts_are_refused_by_host_queues():
    from theano_queue import Queue, QueueError, upto

    q = Queue([("x", "float32", (2,))], target="cpu", name="host")
    with pytest.raises(QueueError, match="queue 'host' lives in host memory; device=True is for GPU queues"):
        q.get(device=True)

    class Device:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(QueueError, match="lives in host memory; put device arrays into a GPU queue"):
        q.put(Device())
    with pytest.raises(TypeError, match="not both; components 'y' are host data"):
        Queue([("x", "float32", (2,)), ("y", "float32", (2,))], target="cpu").put(Device(), [1.0, 2.0])
    assert q.size() == 0
    ragged = Queue([("x", "float32", (2, upto(4)))], target="cpu", name="ragged")
    with pytest.raises(QueueError, match="Queue 'ragged' lives in host memory; put device arrays into a GPU queue"):
        ragged.put(Device(), lengths={"x": [1, 2]})
    assert ragged.size() == 0


def test_the_pycuda_example_says_what_it_needs_and_exits():
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "gpu_augment.py"), "--steps", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=dict(
            os.environ,
            THEANO_FLAGS="device=cpu,floatX=float32",
            PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        ),
    )
    assert done.returncode == 1
    assert "gpu_augment: Theano does not run on a GPU here; run with THEANO_FLAGS=device=cuda0" in done.stderr


def test_a_padded_device_array_fills_a_variable_length_component(fake):
    run(
        fake,
        """
        from theano_queue.core.layout import Padded
        ring, layout = gpu_ring([("x", "int32", (4, tq_upto(10), 3)), ("y", "int16", (4,))], capacity=3,
                                pad_value={"x": -1})
        wide = device_copy(np.arange(4 * 12 * 3, dtype=np.int32).reshape(4, 12, 3))
        y = device_copy(np.arange(4, dtype=np.int16))
        tight = device_copy(np.arange(3 * 6 * 3, dtype=np.int32).reshape(3, 6, 3))
        for data, lengths in [(tight, [6, 2, 6]),               # C-contiguous, padded to its longest row
                              (wide[:, :7], [7, 0, 3, 5]),   # padded wider than its longest row: cut to 7
                              (wide[:3, :10], [10, 10, 1]),   # rows at the bound
                              (wide[:2, ::-1][:, :4], [2, 4])]:  # strided rows
            log()
            put(ring, layout, [Padded(CAI(data, stream=5), np.array(lengths)), CAI(y[:len(lengths)], stream=5)])
            assert "sync" not in log()  # every source has a stream (the zero-byte extents need none): no host wait
            got, gy, got_lengths = layout.unpack(ring.get(), lengths=True)
            assert got.shape == (len(lengths), max(lengths), 3) and got_lengths.tolist() == lengths
            assert gy.tolist() == list(range(len(lengths)))
            for row, want, n in zip(got, np.asarray(data), lengths):
                assert np.array_equal(row[:n], want[:n])  # past a row's length: as the array holds it
        with pytest.raises(TypeError, match="needs its row lengths"):
            put(ring, layout, [CAI(wide[:, :7]), CAI(y)])
        with pytest.raises(ValueError, match="the data there is only 7 long"):
            put(ring, layout, [Padded(CAI(wide[:, :7]), np.array([8, 1, 1, 1])), CAI(y)])
        with pytest.raises(ValueError, match="longer than the bound upto.10."):
            put(ring, layout, [Padded(CAI(wide), np.array([11, 1, 1, 1])), CAI(y)])
        assert ring.stats()["enqueued"] == 4 and ring.size() == 0 and ring.stats()["dropped"] == 0
    """.replace("tq_upto", "__import__('theano_queue').upto"),
    )


def test_a_put_with_elements_ahead_leaves_its_upload_to_the_consumers_next_take(fake):
    # A small training step and its feeder both call the driver, which serialises the two threads: on the
    # H200 the step lost 5 to 20 % to it (doc/design.rst, "Small steps").  With an element ahead of its own,
    # a put calls nothing but the staging's wait; the consumer's next take starts the upload, still one
    # element ahead of its reader.
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (4,))], capacity=3)
        copy = ring.copy_stream
        log()
        ring.put([np.full(4, 0, np.float32)])  # nothing ahead: the put uploads at once
        assert "upload %d" % copy in log()
        ring.put([np.full(4, 1, np.float32)])
        ring.put([np.full(4, 2, np.float32)])
        assert set(log()) <= {"sync"}
        out = device_copy(np.zeros(4, np.float32))
        address = out.__array_interface__["data"][0]
        ring.take_device([address], 99)
        calls = log()
        assert calls.count("upload %d" % copy) == 2, calls  # both left uploads start at this take
        assert calls[-3:] == ["wait 99", "copy 99", "record 99"], calls  # then the take itself
        assert out.tolist() == [0] * 4
        for i in (1, 2):
            ring.take_device([address], 99)
            assert out.tolist() == [i] * 4
            assert "upload %d" % copy not in log()
        ring.put([np.full(4, 3, np.float32)])
        ring.put([np.full(4, 4, np.float32)])
        assert [ring.get()[0].tolist() for _ in range(2)] == [[3] * 4, [4] * 4]  # a host get starts them too
    """,
    )


def test_a_large_element_is_uploaded_by_its_put_even_with_elements_ahead(fake):
    # Past 2 MiB an element's copy outlasts the driver calls that leaving it would save, and a
    # transfer-bound pipeline wants it issued as early as possible: the put issues it.
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (1 << 20,))], capacity=3)  # 4 MiB
        copy = ring.copy_stream
        for i in range(3):
            log()
            ring.put([np.full(1 << 20, i, np.float32)])
            assert "upload %d" % copy in log(), i
        assert [ring.get()[0][:3].tolist() for _ in range(3)] == [[i] * 3 for i in range(3)]
    """,
    )


def test_an_upload_left_for_an_element_dropped_unread_never_lands_on_a_later_one(fake):
    run(
        fake,
        """
        ring, comps = gpu_ring([("x", "float32", (4,))], capacity=2)
        ring.put([np.full(4, 1, np.float32)])
        ring.put([np.full(4, 2, np.float32)])  # its upload is left to a take that never comes
        ring.close(cancel_pending=True)
        ring.reopen()
        for i in (3, 4):  # device puts into both slots, then host puts
            put(ring, comps, [CAI(device_copy(np.full(4, i, np.float32)))])
        assert [ring.get()[0].tolist() for _ in range(2)] == [[3] * 4, [4] * 4]
        ring.put([np.full(4, 5, np.float32)])
        ring.put([np.full(4, 6, np.float32)])
        ring.close(cancel_pending=True)
        ring.reopen()
        ring.put([np.full(4, 7, np.float32)])
        ring.put([np.full(4, 8, np.float32)])
        assert [ring.get()[0].tolist() for _ in range(2)] == [[7] * 4, [8] * 4]
    """,
    )


def test_a_left_upload_that_fails_is_reported_by_its_own_take_and_no_element_is_read_stale(fake):
    # A take queues every upload left, its own first.  One of another element that fails goes back to be
    # queued again by that element's take, which says what failed: dropped, its element was read as whatever
    # the slot held before.
    printed = run(
        fake,
        """
        import os
        from theano_queue.core.errors import QueueError
        ring, comps = gpu_ring([("x", "float32", (4,))], capacity=3)
        out = device_copy(np.zeros(4, np.float32))
        address = out.__array_interface__["data"][0]
        def take():
            ring.take_device([address], 99)
            return out.tolist()[0]
        for i in range(3):
            ring.put([np.full(4, i, np.float32)])
        assert [take() for _ in range(3)] == [0, 1, 2]
        for i in (10, 11, 12):
            ring.put([np.full(4, i, np.float32)])
        os.environ["FAKE_CUDA_FAIL"] = "cuMemcpyHtoDAsync_v2"
        assert take() == 10  # uploaded by its put; 11's upload, left, fails and goes back
        with pytest.raises(QueueError, match="cuMemcpyHtoDAsync"):
            take()  # 11's own take queues it again: it fails, and says so
        del os.environ["FAKE_CUDA_FAIL"]
        assert take() == 12
        ring.put([np.full(4, 13, np.float32)])
        assert take() == 13
        print(ring.stats()["enqueued"], ring.stats()["dequeued"], ring.size())
    """,
    )
    assert printed.split() == ["7", "7", "0"]  # the failed take took its element too: none is left behind


# ---- the host cost of a device put (issue 21): driver calls counted ----------------------------------------------

COUNT_CALLS = """
import ctypes
driver.fake_cuda_calls.argtypes = [ctypes.c_char_p]
CALLED = ["cuEventCreate", "cuEventRecord", "cuStreamWaitEvent", "cuPointerGetAttribute", "cuPointerGetAttributes",
          "cuCtxPushCurrent_v2"]
def calls_per_put(do_put, then=lambda: None, puts=10):
    # driver calls per do_put(), by name; each is followed by then(), not counted
    counted = dict.fromkeys(CALLED, 0)
    for _ in range(puts):
        before = [driver.fake_cuda_calls(name.encode()) for name in CALLED]
        do_put()
        for name, b in zip(CALLED, before):
            counted[name] += driver.fake_cuda_calls(name.encode()) - b
        then()
    return {name: count / puts for name, count in counted.items()}
"""


def test_a_steady_device_put_makes_no_event_and_asks_at_most_one_pointer_query_per_component(fake):
    # Today's put made and destroyed an event per stream and asked four pointer queries per component:
    # ~95 us of host time each on the H200.  Events come from the ring's pool; an allocation's facts are
    # asked once (cuPointerGetAttributes) and then only checked by its buffer ID.
    run(
        fake,
        COUNT_CALLS
        + textwrap.dedent(
            """
        ring, comps = gpu_ring([("x", "float32", (4, 3)), ("y", "int16", (4,))], capacity=2)
        x = device_copy(np.arange(12, dtype=np.float32).reshape(4, 3))
        y = device_copy(np.arange(4, dtype=np.int16))
        def put_both(stream):
            return lambda: put(ring, comps, [CAI(x, stream=stream), CAI(y, stream=stream)])
        def take():
            assert [a.tolist() for a in ring.get()] == [x.tolist(), y.tolist()]
        first = calls_per_put(put_both(5), take, puts=1)
        assert first["cuPointerGetAttributes"] == 2 and first["cuPointerGetAttribute"] == 0  # one query each
        steady = calls_per_put(put_both(5), take)
        assert steady["cuEventCreate"] == 0, steady
        assert steady["cuPointerGetAttributes"] == 0 and steady["cuPointerGetAttribute"] <= 2, steady
        # One stream for both: the copy runs on it after the slot's last reader, and records filled there.
        assert steady["cuEventRecord"] == 1 and steady["cuStreamWaitEvent"] == 1, steady
        # The ring's context entered once a put, for its probes and its copy: none for the stream's context.
        assert steady["cuCtxPushCurrent_v2"] == 1, steady
        put_two = lambda: put(ring, comps, [CAI(x, stream=5), CAI(y, stream=6)])
        calls_per_put(put_two, take, puts=1)  # the first pooled event is made
        two_streams = calls_per_put(put_two, take)
        assert two_streams["cuEventCreate"] == 0, two_streams  # the pooled events
        # A record on each stream and the copy stream's wait for it, the slot's wait and record, each stream's wait.
        assert two_streams["cuEventRecord"] == 3 and two_streams["cuStreamWaitEvent"] == 5, two_streams
        assert calls_per_put(put_both(None), take)["cuEventCreate"] == 0  # the host waits: no event at all
    """
        ),
    )


def test_an_address_freed_and_allocated_again_is_asked_afresh(fake):
    # A cache of what the driver said of an allocation must not outlive it: the same address, freed and
    # allocated again in another context or on another GPU, is another allocation with other facts.
    run(
        fake,
        COUNT_CALLS
        + textwrap.dedent(
            """
        ring, comps = gpu_ring([("x", "float32", (3, 4))], capacity=2, name="fresh")
        size = 3 * 4 * 4 + 4096  # one malloc size no other allocation here shares: freed, it is handed back
        def allocate(context):
            p = ctypes.c_ulonglong()
            assert driver.cuCtxPushCurrent_v2(ctypes.c_void_p(context)) == 0
            assert driver.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)) == 0
            driver.cuCtxPopCurrent_v2(None)
            return p.value
        def fill(address, value):
            view = np.ctypeslib.as_array((ctypes.c_float * 12).from_address(address)).reshape(3, 4)
            view[...] = value
            return view
        first = allocate(PRIMARY)
        put(ring, comps, [CAI(fill(first, 1.0))])
        put(ring, comps, [CAI(fill(first, 2.0))])  # known now: cached
        assert [ring.get()[0].tolist() for _ in range(2)] == [[[1.0] * 4] * 3, [[2.0] * 4] * 3]
        for context in (OTHER_CONTEXT, 0x1001):
            assert driver.cuMemFree_v2(ctypes.c_ulonglong(first)) == 0
            again = allocate(context)
            if again != first:
                driver.cuMemFree_v2(ctypes.c_ulonglong(again))
                pytest.skip("malloc did not hand the freed address back")
            log()
            if context == OTHER_CONTEXT:
                put(ring, comps, [CAI(fill(again, 3.0))])
                assert any(line.startswith("peer") for line in log())  # copied between contexts, not as ours
                assert ring.get()[0].tolist() == [[3.0] * 4] * 3
                with pytest.raises(ValueError, match="strided array from another CUDA context"):
                    put(ring, comps, [CAI(fill(again, 4.0)[:, ::-1])])
            else:
                with pytest.raises(ValueError, match="component 'x': the array is on GPU 1, the queue on GPU 0"):
                    put(ring, comps, [CAI(fill(again, 5.0))])
            first = again
        driver.cuMemFree_v2(ctypes.c_ulonglong(first))
        assert ring.size() == 0 and ring.stats()["dropped"] == 0
    """
        ),
        FAKE_CUDA_DEVICES="2",
    )


def test_the_pooled_events_go_with_the_ring_on_every_path(fake):
    run(
        fake,
        """
        import gc, os, threading
        from theano_queue.core.errors import CudaError
        events = lambda: driver.fake_cuda_events()
        assert events() == 0
        ring, comps = gpu_ring([("x", "float32", (4,)), ("y", "float32", (4,))], capacity=4)
        held = events()  # the slots' own: filled and consumed
        x = device_copy(np.ones(4, np.float32))
        def produce(stream):  # two streams an element: the copy stream is ordered after both, with events
            for _ in range(20):
                put(ring, comps, [CAI(x, stream=stream), CAI(x, stream=stream + 100)])
        threads = [threading.Thread(target=produce, args=(s,)) for s in (11, 12, 13)]
        for t in threads:
            t.start()
        for _ in range(60):
            assert [a.tolist() for a in ring.get()] == [[1.0] * 4] * 2
        for t in threads:
            t.join()
        assert held < events() <= held + 3  # at most one pooled per producer that ever put at once
        os.environ["FAKE_CUDA_FAIL"] = "cuStreamWaitEvent"  # a put whose ordering fails gives its event back
        with pytest.raises(CudaError, match="cuStreamWaitEvent"):
            put(ring, comps, [CAI(x, stream=11), CAI(x, stream=12)])
        del os.environ["FAKE_CUDA_FAIL"]
        assert held < events() <= held + 3
        other = device_copy(np.full(4, 2.0, np.float32), context=OTHER_CONTEXT)
        put(ring, comps, [CAI(other, stream=14), CAI(x, stream=15)])  # another context's event is its own
        assert [a.tolist() for a in ring.get()] == [[2.0] * 4, [1.0] * 4] and events() <= held + 3
        del ring
        gc.collect()
        assert events() == 0
        unused, _ = gpu_ring([("x", "float32", (4,))], capacity=2)  # a ring that never pooled one
        del unused
        gc.collect()
        assert events() == 0
    """,
    )
