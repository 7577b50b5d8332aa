"""A GPU ring lends a slot's device block to its consumer instead of copying it (c_code/engine/cuda/tq_cuda_lend.c),
against the stand-in driver (tests/c/fake_libcuda.c, whose "device memory" is host memory it knows): no copy
when a spare block is free, the block untouched while the consumer holds it, a copy when no spare is free,
the give-back one event record on the consumer's stream, a spare that cannot be made never tried again, and
everything freed at exit.  tests/gpu/test_gpu.py runs the GpuDequeue's lending on the GPU."""

import textwrap

from fake_cuda import fake_cuda  # noqa: F401  (a fixture)
from test_device_fake import fake, run  # noqa: F401  (fake is a fixture)

# Element views over the stand-in's device memory, and a ring of two slots with two components.
PRELUDE = """
import ctypes, os
def view(address, like):
    raw = (ctypes.c_ubyte * like.nbytes).from_address(address)
    return np.ctypeslib.as_array(raw).view(like.dtype).reshape(like.shape)
ring, comps = gpu_ring([("x", "float32", (4, 3)), ("y", "int16", (4,))], capacity=2)
a = [np.arange(12, dtype=np.float32).reshape(4, 3), np.arange(4, dtype=np.int16)]
b = [a[0] + 100, a[1] + 100]
outs = [device_copy(np.zeros_like(a[0])), device_copy(np.zeros_like(a[1]))]
dsts = [o.ctypes.data for o in outs]
STREAM = 77  # the consumer's stream, as Theano's is
"""


def test_a_lent_block_is_not_copied_and_stays_intact_until_given_back(fake):  # noqa: F811
    run(
        fake,
        PRELUDE
        + textwrap.dedent(
            """
        ring.put(a)
        log()
        rows, lease, where = ring.lend_device(dsts, STREAM)
        calls = log()
        assert rows == (4, 4) and lease is not None and where[0] not in dsts
        assert "wait %d" % STREAM in calls and not [c for c in calls if c.startswith("copy")], calls
        assert [view(w, x).tolist() for w, x in zip(where, a)] == [x.tolist() for x in a]
        # The slot went back to the producers at once: both slots are refilled (the lent one's too), and the
        # block the consumer holds is not written.
        ring.put(b)
        ring.put(b)
        assert [view(w, x).tolist() for w, x in zip(where, a)] == [x.tolist() for x in a]
        # The second spare goes to the next element; with both lent, the third is copied to dsts.
        rows, second, where2 = ring.lend_device(dsts, STREAM)
        assert second is not None and where2[0] not in (where[0], *dsts)
        log()
        rows, third, where3 = ring.lend_device(dsts, STREAM)
        assert third is None and list(where3) == dsts
        assert log().count("copy %d" % STREAM) == 2  # one per component, on the consumer's stream
        assert [o.tolist() for o in outs] == [x.tolist() for x in b]
        # The give-back is one record on the consumer's stream, no host wait; the spare is then lent again.
        del lease
        assert log() == ["record %d" % STREAM]
        ring.put(a)
        rows, again, where4 = ring.lend_device(dsts, STREAM)
        assert again is not None and where4[0] != where2[0]  # the spare given back is lent anew
        assert [view(w, x).tolist() for w, x in zip(where4, a)] == [x.tolist() for x in a]
        assert ring.stats()["lent"] == 3 and ring.stats()["dequeued"] == 4
        del second, again
        # No stream, no lending: a consumer that cannot be ordered on the GPU gets a copy.
        ring.put(b)
        assert ring.lend_device(dsts, 0)[1] is None and ring.stats()["lent"] == 3
        del ring
    """
        ),
    )


def test_a_spare_that_cannot_be_made_is_not_tried_again(fake):  # noqa: F811
    run(
        fake,
        PRELUDE
        + textwrap.dedent(
            """
        allocations = lambda: driver.fake_cuda_calls(b"cuMemAlloc_v2")
        made = allocations()
        os.environ["FAKE_CUDA_FAIL"] = "cuMemAlloc_v2"  # the device is out of memory
        for element in (a, b):
            ring.put(element)
            rows, lease, where = ring.lend_device(dsts, STREAM)
            assert lease is None and [o.tolist() for o in outs] == [x.tolist() for x in element]
        assert allocations() == made + 2  # each spare tried once
        del os.environ["FAKE_CUDA_FAIL"]
        for _ in range(3):
            ring.put(a)
            assert ring.lend_device(dsts, STREAM)[1] is None
        assert allocations() == made + 2 and ring.stats()["lent"] == 0
        # The events are made after the blocks: one that fails gives its block back, and the spare is dropped.
        other, _ = gpu_ring([("x", "float32", (4, 3)), ("y", "int16", (4,))], capacity=2)
        os.environ["FAKE_CUDA_FAIL"] = "cuEventCreate"
        other.put(a)
        assert other.lend_device(dsts, STREAM)[1] is None
        del os.environ["FAKE_CUDA_FAIL"]
        other.put(a)
        rows, lease, where = other.lend_device(dsts, STREAM)
        assert lease is not None and other.stats()["lent"] == 1
        del lease, ring, other
    """
        ),
    )


def test_a_ring_freed_with_its_spares_made_frees_them(fake):  # noqa: F811
    # run() checks that the stand-in holds no device memory at exit: the spares went with the ring.
    out = run(
        fake,
        PRELUDE
        + textwrap.dedent(
            """
        held_before = driver.fake_cuda_device_allocs()
        leases = []
        for _ in range(2):
            ring.put(a)
            leases.append(ring.lend_device(dsts, STREAM)[1])
        assert driver.fake_cuda_device_allocs() == held_before + 2 and None not in leases
        del leases
        del ring
        print(driver.fake_cuda_device_allocs() - held_before)
    """
        ),
    )
    assert out.split()[-1] == "-2"  # the two slots and their two spares: four blocks, all freed
