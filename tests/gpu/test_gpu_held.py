"""``Feeder(q, arrays, device=True)`` on a GPU: the array dataset copied to the device once, each batch
gathered there by the engine's kernel.

Every batch is compared with numpy's rows of the sampler's indices (the
host array dataset's batches), through ``q.get()`` and through a compiled
graph that reads a value back every step while the Feeder gathers (the
training loop's thread inside libgpuarray while the Feeder's thread runs the
engine's kernel in its own context push).  Run on a GPU with
``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_gpu_held.py``;
tests/cpu/test_held.py checks the refusals and the producer's logic without one.
"""

import ctypes

import numpy as np
import pytest
from helpers import drain

import theano_queue as tq
from theano_queue import _engine
from theano_queue.sampler import Sampler
from theano_queue.tools import probe

pytestmark = pytest.mark.gpu

ROWS = 8


def gpu_queue(shape=(3,), dtype="float32", batch=ROWS, capacity=3):
    q = tq.Queue([("x", dtype, (batch,) + shape), ("i", "int64", (batch,))], capacity=capacity)
    assert q.on_gpu
    return q


def dataset(n, shape=(3,), dtype="float32"):
    rng = np.random.default_rng(n)
    if dtype == "uint8":
        x = rng.integers(0, 256, (n,) + shape, dtype="uint8")
    else:
        x = rng.standard_normal((n,) + shape).astype(dtype)
    return x, np.arange(n, dtype="int64")


def feed(q, arrays, **args):
    with tq.Feeder(q, arrays, device=True, **args) as feeder:
        got = drain(q, timeout=60)
    return got, feeder


def check(got, x, sampler, labels=None):
    """Each batch is the sampler's rows of x (and of labels: the row numbers themselves unless given)."""
    assert len(got) == sampler.batches_per_epoch * sampler.epochs
    for position, (xb, ib) in enumerate(got):
        rows = sampler.batch(position)
        np.testing.assert_array_equal(ib, rows if labels is None else labels[rows])
        assert xb.tobytes() == x[rows].astype(xb.dtype).tobytes()


def test_every_sample_once_per_epoch_in_a_new_order_each_epoch_with_a_partial_last_batch():
    x, i = dataset(100)
    q = gpu_queue()
    before = _engine.cuda_allocated()["device"]
    got, feeder = feed(q, (x, i), shuffle=True, seed=7, epochs=3)
    sampler = Sampler(100, ROWS, shuffle=True, seed=7, epochs=3)
    check(got, x, sampler)
    per_epoch = sampler.batches_per_epoch  # 13: 12 full batches and one of 4 rows
    epochs = [np.concatenate([ib for _, ib in got[e * per_epoch : (e + 1) * per_epoch]]) for e in range(3)]
    assert all(sorted(e.tolist()) == list(range(100)) for e in epochs)
    assert len({tuple(e.tolist()) for e in epochs}) == 3
    assert len(got[per_epoch - 1][1]) == 4
    assert feeder.stats()["gather"] == {"i": "device", "x": "device"}
    assert _engine.cuda_allocated()["device"] == before  # the device copy is freed when the run ends


def test_the_same_seed_gives_the_same_order_as_the_host_array_dataset():
    x, i = dataset(64)
    on_gpu, _ = feed(gpu_queue(), (x, i), shuffle=True, seed=11, epochs=2)
    q = gpu_queue()
    with tq.Feeder(q, (x, i), shuffle=True, seed=11, epochs=2):
        host = drain(q, timeout=60)
    assert [ib.tolist() for _, ib in on_gpu] == [ib.tolist() for _, ib in host]
    assert all(a.tobytes() == b.tobytes() for (a, _), (b, _) in zip(on_gpu, host))


def test_rows_of_several_axes_cast_once_reversed_views_and_large_rows():
    x, i = dataset(40, shape=(4, 5), dtype="uint8")  # uint8 into a float32 component: a safe cast, done once
    got, _ = feed(gpu_queue(shape=(4, 5)), (x, i), shuffle=True, seed=2)
    check(got, x, Sampler(40, ROWS, shuffle=True, seed=2))
    y, j = dataset(40, shape=(6,))
    got, _ = feed(gpu_queue(shape=(6,)), (y[::-1], j[::-1]), shuffle=True, seed=3)  # a negative stride, held as is
    check(got, y[::-1], Sampler(40, ROWS, shuffle=True, seed=3), labels=j[::-1])
    big, k = dataset(40, shape=(512 * 1024,))  # 2 MiB rows, 64 MiB batches
    got, _ = feed(gpu_queue(shape=(512 * 1024,), batch=32, capacity=2), (big, k), shuffle=True, seed=4)
    check(got, big, Sampler(40, 32, shuffle=True, seed=4))


def test_resume_from_state_dict_mid_epoch_loses_and_repeats_nothing():
    x, i = dataset(50)
    q = gpu_queue(capacity=2)
    taken = []
    with tq.Feeder(q, (x, i), shuffle=True, seed=5, epochs=2, close_when_done=False, device=True) as feeder:
        for _ in range(4):
            taken.append(q.get(timeout=60)[1])
        state = feeder.state_dict()
    q.close(cancel_pending=True)
    q.reopen()
    assert state["position"] == 4
    rest, _ = feed(q, (x, i), shuffle=True, seed=5, epochs=2, state=state)
    sampler = Sampler(50, ROWS, shuffle=True, seed=5, epochs=2)
    order = [ib.tolist() for ib in taken] + [ib.tolist() for _, ib in rest]
    assert order == [sampler.batch(p).tolist() for p in range(sampler.total)]


def test_shards_are_disjoint_and_together_the_epoch():
    x, i = dataset(48)
    seen = []
    for rank in range(2):
        got, _ = feed(gpu_queue(), (x, i), shuffle=True, seed=1, shard=(rank, 2))
        check(got, x, Sampler(48, ROWS, shuffle=True, seed=1, shard=(rank, 2)))
        seen.append([k for _, ib in got for k in ib.tolist()])
    assert sorted(seen[0] + seen[1]) == list(range(48)) and not set(seen[0]) & set(seen[1])


def test_a_graph_reads_every_batch_while_the_feeder_gathers():
    """The step reads its result back (libgpuarray's blocking read, the GIL released) while the Feeder's
    thread gathers: every batch arrives whole, in the sampler's order, and nothing fails for want of a context."""
    import theano

    x, i = dataset(4000, shape=(256,))
    q = gpu_queue(shape=(256,), batch=64)
    xs, ids = q.dequeue()
    step = theano.function([], [xs.sum(axis=1), ids])
    sampler = Sampler(4000, 64, shuffle=True, seed=9, epochs=3)
    with tq.Feeder(q, (x, i), shuffle=True, seed=9, epochs=3, device=True):
        for position in range(sampler.total):
            sums, got = step()
            np.testing.assert_array_equal(got, sampler.batch(position))
            np.testing.assert_allclose(sums, x[got].sum(axis=1), rtol=1e-4, atol=1e-3)
        with pytest.raises(tq.QueueClosed):
            step()


def test_a_dataset_larger_than_the_free_device_memory_is_refused_naming_the_sizes():
    """The GPU filled but for 256 MiB; a 1 GiB dataset is refused where the Feeder starts, nothing is
    queued or held, and once the memory is back the same arrays feed the queue."""
    q = gpu_queue(shape=(1024,))
    x, i = dataset(1 << 18, shape=(1024,))  # 1 GiB and 2 MiB
    cu, blocker = probe.driver(), ctypes.c_uint64()
    with probe.device_context(0):
        free, _ = ctypes.c_size_t(), ctypes.c_size_t()
        cu.MemGetInfo(ctypes.byref(free), ctypes.byref(_))
        cu.MemAlloc(ctypes.byref(blocker), free.value - (256 << 20))
    try:
        before = _engine.cuda_allocated()["device"]
        feeder = tq.Feeder(q, (x, i), shuffle=True, device=True)
        with pytest.raises(ValueError) as caught:
            feeder.start()
        message = str(caught.value)
        assert "device=True holds the array dataset in GPU memory (1 GiB in all; x: 1 GiB, i: 0.00195 GiB)" in message
        assert "GiB free" in message and "Leave device=False" in message
        assert q.size() == 0 and not q.feeders and _engine.cuda_allocated()["device"] == before
    finally:
        with probe.device_context(0):
            cu.MemFree(blocker)
    got, _ = feed(q, (x[:64], i[:64]))
    check(got, x[:64], Sampler(64, ROWS))
