"""Queue.put of device arrays on a GPU queue, against the stand-in driver (tests/c/fake_libcuda.c): the
queue's own path (theano_queue/port.py, device.py) to the engine, which a device producer takes every put
(issue 21: its host time is the put's cost).  tests/test_device_fake.py checks the engine's part."""

from fake_cuda import fake_cuda  # noqa: F401  (a fixture)
from test_device_fake import fake, run  # noqa: F401  (fake is a fixture)


def test_a_gpu_queues_put_takes_device_arrays_in_every_element_form_and_refuses_as_before(fake):  # noqa: F811
    # Queue.put's own path (theano_queue/port.py), not the engine's alone: the element's forms, the refusals
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
            ((CAI(x), CAI(x)), TypeError, "queue 'train', component 'y': expected dtype int16, got a device array"),
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
        with pytest.raises(TypeError, match="queue 'one', component 'x': a masked device array"):
            one.put(masked)
        with pytest.raises(TypeError, match="queue 'one', component 'x': a __cuda_array_interface__ without shape"):
            one.put(type("Bad", (), {"__cuda_array_interface__": {"shape": (4, 3)}})())
        with pytest.raises(TypeError, match="queue 'one', component 'x': a DLPack array on a OpenCL device"):
            one.put(CudaDLPack(x, device_type=4))
        assert one.put(CudaDLPack(x)) == 1 and one.get()[0].tolist() == x.tolist()
        for queue in (q, one):
            s = queue.stats()
            assert (s["size"], s["dropped"]) == (0, 0)
            queue.close()
    """,
        FAKE_CUDA_DEVICES="2",
    )
