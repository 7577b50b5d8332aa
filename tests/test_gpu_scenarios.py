"""Scenarios of a GPU ring that run, with one body each, against the stand-in driver here and on the GPU
(tests/drivers.py's ``driver`` fixture; the GPU half is marked gpu)."""

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
