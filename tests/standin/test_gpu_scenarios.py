"""Scenarios of a GPU ring that run, with one body each, against the stand-in driver here and on the GPU
(tests/support/drivers.py's ``driver`` fixture; the GPU half is marked gpu)."""

from drivers import driver, fake_cuda  # noqa: F401  (fixtures)


def test_registered_host_memory_goes_straight_over_the_bus(driver):  # noqa: F811
    driver.run("""
        rng = np.random.default_rng(6)
        features = rng.standard_normal((256, 17)).astype("float32")
        labels = rng.integers(0, 1 << 30, 256).astype("int32")
        ring = make_ring([("features", "float32", (32, 17)), ("label", "int32", (32,))], capacity=3)
        ring.register_host(features)
        ring.register_host(labels)
        for i in range(0, 256, 32):
            ring.put([features[i : i + 32], labels[i : i + 32]])
            # Read from the registered arrays themselves: no slot's staging ever held these bytes.
            assert not staging_holds(ring, 0, features[i : i + 32]), i
            assert not staging_holds(ring, 1, labels[i : i + 32]), i
            got_features, got_labels = ring.get()
            assert np.array_equal(got_features, features[i : i + 32]) and np.array_equal(got_labels, labels[i : i + 32])
        # The same bytes from memory that is not registered are staged: the check above can see staging.
        copied = features[:32].copy()
        ring.put([copied, labels[:32].copy()])
        assert staging_holds(ring, 0, copied)
        assert np.array_equal(ring.get()[0], copied)
        ring.unregister_host(features)
        ring.unregister_host(labels)
        del ring
    """)


def test_a_reserved_slot_is_written_in_its_pinned_staging(driver):  # noqa: F811
    driver.run("""
        ring = make_ring([("x", "float32", (4, 3)), ("y", "int64", (4,))], capacity=2)
        for k in range(5):
            slot, (x, y) = ring.reserve()
            x[...] = np.arange(12, dtype="float32").reshape(4, 3) + k + 0.5
            y[...] = np.arange(4) * 1000 + k
            # Before the commit: the views are the slot's staging itself, not a buffer copied later.
            assert staging_holds(ring, 0, x) and staging_holds(ring, 1, y), k
            ring.commit(slot, [4, 4])
            got_x, got_y = ring.get()
            assert got_x[0, 0] == k + 0.5 and got_y[1] == 1000 + k
        del ring
    """)


def test_a_dataset_held_in_device_memory_is_gathered_there_and_freed_after(driver):  # noqa: F811
    driver.run("""
        rng = np.random.default_rng(8)
        images = rng.standard_normal((300, 5, 7)).astype("float32")
        labels = rng.integers(0, 10, 300).astype("int64")
        ring = make_ring([("x", "float32", (16, 5, 7)), ("y", "int64", (16,))], capacity=3)
        before = _engine.cuda_allocated()["device"]
        # A reversed view (negative stride) and a dataset of one repeated row (stride 0) are held as the bytes
        # they span; the kernel reads rows at any stride.
        for x, y in ((images, labels), (images[::-1], labels[::-1]), (np.broadcast_to(images[:1], (300, 5, 7)),
                                                                      np.broadcast_to(labels[:1], (300,)))):
            assert ring.gather_on_device([x, y], "device") == "device"
            spans = abs(x.strides[0]) * 299 + x[0].nbytes + abs(y.strides[0]) * 299 + y[0].nbytes
            assert _engine.cuda_allocated()["device"] - before >= spans, (_engine.cuda_allocated(), before, spans)
            order = rng.permutation(300)
            # 18 batches of 16 and a partial one of 12, put two by two (the ring holds 3): each equals its rows.
            taken = 0
            for first in range(0, 19, 2):
                assert ring.put_rows([x, y], order, 16, first, 2) == min(2, 19 - first)
                while taken < min(first + 2, 19):
                    got_x, got_y = ring.get()
                    rows = order[taken * 16 : (taken + 1) * 16]
                    assert len(got_y) == len(rows) and np.array_equal(got_x, x[rows]), taken
                    assert np.array_equal(got_y, y[rows]), taken
                    taken += 1
            ring.gather_on_host()
            assert _engine.cuda_allocated()["device"] == before, (_engine.cuda_allocated(), before)  # all freed
        del ring
    """)
