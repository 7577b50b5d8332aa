"""``Feeder(q, arrays, device=True)`` on a GPU: the array dataset uploaded once, each batch gathered by the GPU.

Every batch is compared with numpy's rows of the sampler's indices (the
host array dataset's batches), through ``q.get()`` and through a compiled
graph that reads a value back every step while the Feeder gathers (the
training loop's thread inside libgpuarray while the Feeder's calls it).
Run on a GPU with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/test_gpu_resident.py``.
(tests/test_resident.py checks the refusals and the producer's logic without a GPU.)
"""
import numpy as np
import pytest

import theano_queue as tq
from helpers import drain
from theano_queue.feed import resident
from theano_queue.sampler import Sampler

pytestmark = pytest.mark.gpu

ROWS = 8


def gpu_queue(shape=(3,), dtype="float32", batch=ROWS, capacity=3):
    q = tq.Queue([("x", dtype, (batch,) + shape), ("i", "int64", (batch,))], capacity=capacity)
    assert q.on_gpu
    return q


def dataset(n, shape=(3,), dtype="float32"):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n,) + shape).astype(dtype) if dtype != "uint8" else rng.integers(
        0, 256, (n,) + shape, dtype="uint8")
    return x, np.arange(n, dtype="int64")


def feed(q, arrays, **args):
    with tq.Feeder(q, arrays, device=True, **args) as feeder:
        got = drain(q, timeout=60)
    return got, feeder


def check(got, x, sampler):
    assert len(got) == sampler.batches_per_epoch * sampler.epochs
    for position, (xb, ib) in enumerate(got):
        np.testing.assert_array_equal(ib, sampler.batch(position))
        assert xb.tobytes() == x[ib].astype(xb.dtype).tobytes()


def test_every_sample_once_per_epoch_in_a_new_order_each_epoch_with_a_partial_last_batch():
    x, i = dataset(100)
    got, feeder = feed(gpu_queue(), (x, i), shuffle=True, seed=7, epochs=3)
    sampler = Sampler(100, ROWS, shuffle=True, seed=7, epochs=3)
    check(got, x, sampler)
    per_epoch = sampler.batches_per_epoch  # 13: 12 full batches and one of 4 rows
    epochs = [np.concatenate([ib for _, ib in got[e * per_epoch : (e + 1) * per_epoch]]) for e in range(3)]
    assert all(sorted(e.tolist()) == list(range(100)) for e in epochs)
    assert len({tuple(e.tolist()) for e in epochs}) == 3
    assert len(got[per_epoch - 1][1]) == 4
    assert feeder.stats()["gather"] == "device"


def test_the_same_seed_gives_the_same_order_as_the_host_array_dataset():
    x, i = dataset(64)
    on_gpu, _ = feed(gpu_queue(), (x, i), shuffle=True, seed=11, epochs=2)
    again, _ = feed(gpu_queue(), (x, i), shuffle=True, seed=11, epochs=2)
    q = gpu_queue()
    with tq.Feeder(q, (x, i), shuffle=True, seed=11, epochs=2):
        host = drain(q, timeout=60)
    assert [ib.tolist() for _, ib in on_gpu] == [ib.tolist() for _, ib in again] == [ib.tolist() for _, ib in host]


def test_rows_of_several_axes_cast_on_upload_and_large_batches_alone():
    x, i = dataset(40, shape=(4, 5), dtype="uint8")  # uint8 into a float32 component: a safe cast, done once
    got, _ = feed(gpu_queue(shape=(4, 5)), (x, i), shuffle=True, seed=2)
    check(got, x, Sampler(40, ROWS, shuffle=True, seed=2))
    big, j = dataset(40, shape=(512 * 1024,))  # 2 MiB rows: 64 MiB batches, gathered one at a time
    q = gpu_queue(shape=(512 * 1024,), batch=32, capacity=2)
    assert resident.batches_per_gather(q.components) == 1
    got, _ = feed(q, (big, j), shuffle=True, seed=4)
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


def test_a_dataset_larger_than_the_gpu_is_refused_before_any_upload(monkeypatch):
    q = gpu_queue(shape=(1024,))
    free = resident.free_device_bytes(q._target.context_name)
    rows = free // 4096 + (1 << 20)  # more than all the free memory: a stride-0 view claims it
    huge = np.lib.stride_tricks.as_strided(np.zeros(1024, "float32"), shape=(rows, 1024), strides=(0, 4))
    labels = np.lib.stride_tricks.as_strided(np.zeros(1, "int64"), shape=(rows,), strides=(0,))
    uploads = []
    monkeypatch.setattr(resident, "DeviceArrays", lambda *args, **kwargs: uploads.append(args))
    with pytest.raises(ValueError) as caught:
        tq.Feeder(q, (huge, labels), shuffle=True, device=True)
    message = str(caught.value)
    assert "device=True holds the array dataset in device memory, and it does not fit" in message
    assert "its %d rows take" % rows in message and "GiB free" in message
    assert not uploads and q.size() == 0
