"""Queue.put of device arrays on a GPU queue, against the stand-in driver (tests/c/fake_libcuda.c): the
queue's own path (theano_queue/core/port.py, device.py) to the engine, which a device producer takes every put
(issue 21: its host time is the put's cost).  tests/standin/test_device_fake.py checks the engine's part."""

from fake_cuda import fake_cuda  # noqa: F401  (a fixture)
from test_device_fake import fake, run  # noqa: F401  (fake is a fixture)


def test_a_gpu_queues_put_takes_device_arrays_in_every_element_form_and_refuses_as_before(fake):  # noqa: F811
    # Queue.put's own path (theano_queue/core/port.py), not the engine's alone: the element's forms, the refusals
    # and their messages, and nothing put by a refused element.
    run(
        fake,
        """
        from collections import UserDict
        q = gpu_queue([("x", "float32", (4, 3)), ("y", "int16", (4,))], capacity=8, name="train")
        x = device_copy(np.arange(12, dtype=np.float32).reshape(4, 3))
        y = device_copy(np.arange(4, dtype=np.int16))
        for element in [(CAI(x), CAI(y)), ((CAI(x), CAI(y)),), ([CAI(x), CAI(y)],), ({"y": CAI(y), "x": CAI(x)},),
                        (UserDict(x=CAI(x), y=CAI(y)),)]:
            assert q.put(*element) == q.size()
        assert q.put(CAI(x, stream=5), CAI(y, stream=5)) == 6
        assert q.put(CAI(x), CAI(y), stream=9) == 7
        for _ in range(7):
            got = q.get()
            assert [a.tolist() for a in got] == [x.tolist(), y.tolist()]
        refused = [
            ((CAI(x), y.copy()), TypeError, "not both; components 'y' are host data"),
            ((CAI(x), CAI(x)), TypeError, "Queue 'train', component 'y': expected dtype int16, got a device array"),
            ((CAI(y), CAI(y)), TypeError, "component 'x': expected dtype float32"),
            ((CAI(x[:, :2]), CAI(y)), ValueError, "expected shape"),
            ((CAI(np.zeros((4, 3), np.float32)), CAI(y)), ValueError, "expected device memory of GPU 0"),
            ((CAI(x),), ValueError, "expected 2 components"),
            ((CAI(x), CAI(y, stream=0)), ValueError, "stream 0 is ambiguous"),
            ((CAI(x), CAI(y, stream="s")), TypeError, "component 'y': __cuda_array_interface__ 'stream' must be"),
        ]
        for element, error, message in refused:
            with pytest.raises(error, match=message):
                q.put(*element)
        with pytest.raises(TypeError, match="stream must be None, a CUstream handle"):
            q.put(CAI(x), CAI(y), stream="default")
        one = gpu_queue([("x", "float32", (4, 3))], name="one")
        assert one.put(CAI(x)) == 1 and one.put((CAI(x),)) == 2
        assert [one.get()[0].tolist() for _ in range(2)] == [x.tolist()] * 2
        assert one.put({"x": CAI(x)}) == 1 and one.get()[0].tolist() == x.tolist()
        class Masked(CAI):
            pass
        masked = Masked(x)
        masked.__cuda_array_interface__["mask"] = 1
        with pytest.raises(TypeError, match="Queue 'one', component 'x': a masked device array"):
            one.put(masked)
        with pytest.raises(TypeError, match="Queue 'one', component 'x': a __cuda_array_interface__ without shape"):
            one.put(type("Bad", (), {"__cuda_array_interface__": {"shape": (4, 3)}})())
        with pytest.raises(TypeError, match="Queue 'one', component 'x': a DLPack array on a OpenCL device"):
            one.put(CudaDLPack(x, device_type=4))
        assert one.put(CudaDLPack(x)) == 1 and one.get()[0].tolist() == x.tolist()
        for queue in (q, one):
            s = queue.stats()
            assert (s["size"], s["dropped"]) == (0, 0)
            queue.close()
    """,
        FAKE_CUDA_DEVICES="2",
    )


def test_a_put_without_a_stream_polls_for_its_copy_before_it_sleeps_on_the_event(fake):  # noqa: F811
    # The slot's events are blocking-sync: a host wait on one sleeps until the GPU's interrupt wakes the
    # thread, tens of microseconds after a device copy of a few MiB is done.  The put polls for as long as
    # its copy should take, and only a copy still running then is waited for asleep.
    run(
        fake,
        """
        import os
        ring, comps = gpu_ring([("x", "float32", (4, 3))], capacity=3)
        copy = ring.copy_stream
        x = device_copy(np.arange(12, dtype=np.float32).reshape(4, 3))
        log()
        put(ring, comps, [CAI(x)])
        assert log() == ["wait %d" % copy, "copy %d" % copy, "record %d" % copy, "query"]  # done at once: no sleep
        os.environ["FAKE_CUDA_NOT_READY"] = "1"  # a copy that is still running after any poll
        put(ring, comps, [CAI(x)])
        calls = log()
        assert calls[:3] == ["wait %d" % copy, "copy %d" % copy, "record %d" % copy]
        assert calls[-1] == "sync" and set(calls[3:-1]) == {"query"}, calls  # polled, then asleep on the event
        del os.environ["FAKE_CUDA_NOT_READY"]
        put(ring, comps, [CAI(x, stream=5)])  # a producer's stream waits on the GPU: no host wait at all
        assert "query" not in log() and "sync" not in log()
        assert [ring.get()[0].tolist() for _ in range(3)] == [x.tolist()] * 3
        from theano_queue.core.errors import CudaError
        os.environ["FAKE_CUDA_FAIL"] = "cuEventQuery"
        with pytest.raises(CudaError, match="cuEventQuery"):
            put(ring, comps, [CAI(x)])
        assert log()[-1] == "sync"  # a failed poll still waits: the array is read before the put returns
        del os.environ["FAKE_CUDA_FAIL"]
        put(ring, comps, [CAI(x)])  # the queue goes on
        assert ring.get()[0].tolist() == x.tolist() and ring.stats()["dropped"] == 1
    """,
    )


def test_a_gpu_queues_feeder_gives_fresh_batches_to_the_rings_putter(fake):  # noqa: F811
    # The putter thread copies into the pinned staging and issues the upload on the copy stream (the CUDA
    # backend's put, from a thread of the engine's own): every batch arrives exact and in order, and
    # nothing stays held (run() checks the stand-in's memory after the process ends).
    run(
        fake,
        """
        import theano_queue as tq
        q = gpu_queue([("x", "float32", (64, 32)), ("y", "int64", (64,))], capacity=3, name="given")
        data = np.arange(1024 * 32, dtype=np.float32).reshape(1024, 32)
        orders = [np.random.default_rng(i).permutation(1024)[:64] for i in range(30)]
        with tq.Feeder(q, ((data[o], o.copy()) for o in orders), close_when_done=False) as feeder:
            got = [q.get() for _ in range(30)]
            feeder.join(10)
        assert all(np.array_equal(x, data[o]) and np.array_equal(y, o) for (x, y), o in zip(got, orders))
        assert feeder.stats()["gil_waits"] < 30  # puts that found a free slot left their copies to the putter
        q.close()
        """,
    )
