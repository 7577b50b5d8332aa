"""GpuDequeue lends the slot's device block to the graph (c_code/engine/cuda/tq_cuda_lend.c, gpu_dequeue.c): on the GPU,
what the graph and a caller hold is never overwritten while the queue goes on, a batch is copied when no
spare block is free, and everything is given back.  tests/standin/test_lend_fake.py checks the engine's ordering
against the stand-in driver; these need a GPU (``pytest tests/gpu``) and skip elsewhere."""

import gc

import numpy as np
import pytest

import theano_queue as tq

pytestmark = pytest.mark.gpu


def batches(count, shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype("float32") for _ in range(count)]


@pytest.mark.parametrize("linker", ["cvm", "cvm_nogc"])
def test_the_dequeue_lends_the_slot_and_never_writes_into_a_lent_output(linker):
    # cvm_nogc keeps every node's outputs between calls and hands them back to the node: a lent output must be
    # dropped, not written into (a caller may hold it).  Every batch is lent: the graph gives each back.
    import theano

    q = tq.Queue([("x", "float32", (64, 32))], capacity=3)
    x = q.dequeue()
    # x.transfer(None): the function returns the GPU array itself (no copy to the host), as a GPU graph's
    # intermediate values are.
    f = theano.function([], [x.transfer(None), (x * 2).sum()], mode=theano.Mode(linker=linker))
    data = batches(40, (64, 32), seed=1)
    kept = []
    with tq.Feeder(q, data):
        for want in data:
            got, doubled = f()
            kept.append(got)
            np.testing.assert_allclose(doubled, 2 * want.sum(dtype="float64"), rtol=1e-4)
            if len(kept) > 1:
                del kept[0]  # the caller keeps one batch at a time: a spare is always free
    assert q.stats()["lent"] == len(data) and q.stats()["dequeued"] == len(data)
    assert np.array_equal(np.asarray(kept[-1]), data[-1])


def test_arrays_a_caller_keeps_stay_intact_while_the_queue_goes_on():
    # The caller keeps every batch: the first two are lent (both spares), the rest copied; nothing kept is
    # overwritten while a Feeder refills every slot many times over.
    import theano

    q = tq.Queue([("x", "float32", (128, 256)), ("i", "int32", ())], capacity=2)
    x, i = q.dequeue()
    f = theano.function([], [x.transfer(None), i.transfer(None)])  # GPU arrays, not host copies
    data = [(b, np.int32(k)) for k, b in enumerate(batches(60, (128, 256), seed=2))]
    kept = []
    with tq.Feeder(q, data):
        for _ in data:
            kept.append(f())
    assert q.stats()["lent"] == 2
    for k, (got_x, got_i) in enumerate(kept):
        assert int(np.asarray(got_i)) == k and np.array_equal(np.asarray(got_x), data[k][0]), k
    del kept
    gc.collect()
    q.reopen()  # the Feeder closed the queue once its data was put
    for _ in range(3):  # both spares were given back: lent again
        q.put(data[0])
        f()
    assert q.stats()["lent"] == 5


def test_a_lent_batch_is_not_overwritten_before_a_long_chain_of_kernels_reads_it_again():
    # The graph reads the batch, runs a long chain of matrix products, then reads the batch again; a Feeder
    # refills the slots meanwhile (the slot went back to the producers at once).  The second read sees the
    # batch the first read saw.
    import theano
    import theano.tensor as T

    n = 1024
    q = tq.Queue([("x", "float32", (n, n))], capacity=2)
    x = q.dequeue()
    chain = T.tanh(x)
    for _ in range(24):
        chain = T.tanh(T.dot(chain, chain) * (1.0 / n))
    late = x * T.cast(T.ge(chain.sum(), -1e30), "float32")  # read after the chain (1 unless NaN)
    f = theano.function([], [x.sum(), late.sum(), late[:2, :2]])
    data = batches(30, (n, n), seed=3)
    with tq.Feeder(q, data):
        for k, want in enumerate(data):
            early, later, corner = f()
            assert float(early) == pytest.approx(float(later), rel=1e-6, abs=1e-3), k
            assert np.array_equal(np.asarray(corner), want[:2, :2]), k
    assert q.stats()["lent"] == len(data)


def test_lent_blocks_are_freed_with_their_queue():
    import theano
    from theano.gpuarray.type import get_context

    from theano_queue import _engine

    gc.collect()
    context = get_context(None).ptr
    free_before, _ = _engine.cuda_mem_info(context)
    held_before = _engine.cuda_allocated()
    for k in range(100):
        q = tq.Queue([("x", "float32", (256, 1024))], capacity=2, name="lend%d" % k)  # 1 MiB slots
        f = theano.function([], q.dequeue().transfer(None))
        q.put(np.full((256, 1024), k, "float32"))
        q.put(np.full((256, 1024), k + 1, "float32"))
        kept = [f(), f()]  # both spares made and lent
        assert [float(np.asarray(a)[0, 0]) for a in kept] == [k, k + 1]
        assert q.stats()["lent"] == 2
        del q, f, kept
    gc.collect()
    assert _engine.cuda_allocated() == held_before
    free_after, _ = _engine.cuda_mem_info(context)
    assert abs(free_after - free_before) < 64 << 20, (free_before, free_after)
