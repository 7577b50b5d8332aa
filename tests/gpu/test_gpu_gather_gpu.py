"""The GPU half of tests/cpu/test_gpu_gather.py: every gather mechanism on the GPU, bit-exact, and page locks.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_gpu_gather_gpu.py``."""

import logging

import numpy as np
import pytest
from gpu_gather_helpers import check_batches, gather_records
from helpers import drain

import theano_queue as tq
from theano_queue.sampler import Sampler

pytestmark = pytest.mark.gpu


MECHANISMS = ["batch", "host"]


LARGE_ROW = 256 * 1024  # bytes: rows the default has the GPU copy


def feed(x, batch, mechanism, monkeypatch, q=None, **feeder_args):
    """Every element a Feeder over (x, row numbers) puts into q (a fresh GPU queue), and the feeder's stats."""
    monkeypatch.setenv("THEANO_QUEUE_GATHER", mechanism)
    if q is None:
        q = tq.Queue([("x", x.dtype, (batch,) + x.shape[1:]), ("i", "int64", (batch,))], capacity=3)
    with tq.Feeder(q, (x, np.arange(len(x))), **feeder_args) as feeder:
        got = drain(q)
    return got, feeder.stats()


def unaligned(shape, dtype, skew, rng):
    """Random bytes viewed as an array that starts `skew` bytes past an aligned address."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + skew
    raw[:] = rng.integers(0, 256, size=raw.size, dtype=np.uint8)
    return raw[start : start + nbytes].view(dtype).reshape(shape)


@pytest.mark.gpu
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("row_bytes", [1, 3, 5, 16, 17, 784 * 4, 3072 * 4])
@pytest.mark.parametrize("skew", [0, 1])
def test_every_mechanism_is_bit_exact(mechanism, row_bytes, skew, monkeypatch, caplog):
    rng = np.random.default_rng(row_bytes + skew)
    n, batch = 1000, 64
    # float32 rows where the size allows it, raw bytes otherwise; a view offset by one byte is unaligned.
    dtype, feat = ("float32", row_bytes // 4) if row_bytes % 4 == 0 else ("uint8", row_bytes)
    x = unaligned((n, feat), dtype, skew, rng)
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        got, stats = feed(x, batch, mechanism, monkeypatch, shuffle=True, seed=2)
    check_batches(got, x, Sampler(n, batch, shuffle=True, seed=2))
    assert not gather_records(caplog), gather_records(caplog)[0].getMessage()
    assert stats["gather"]["x"] == mechanism


@pytest.mark.gpu
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_in_order_shards_epochs_and_partial_batches(mechanism, monkeypatch):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1001, 33)).astype("float32")  # rows of 132 bytes: 4-byte words
    for shuffle in (False, True):
        got, stats = feed(x, 100, mechanism, monkeypatch, shuffle=shuffle, seed=3, shard=(1, 3), epochs=2)
        check_batches(got, x, Sampler(1001, 100, shuffle=shuffle, seed=3, shard=(1, 3), epochs=2))
        assert stats["gather"]["x"] == mechanism


@pytest.mark.gpu
@pytest.mark.parametrize(
    "row_bytes, expected",
    [(784 * 4, "host"), (3072 * 4, "host"), (LARGE_ROW, "batch"), (LARGE_ROW + 4, "batch"), (1 << 20, "batch")],
)
def test_by_default_the_gpu_copies_large_rows_and_the_host_gathers_small_ones(row_bytes, expected, monkeypatch, caplog):
    n = min(500, (48 << 20) // row_bytes)
    x = unaligned((n, row_bytes // 4), "float32", 4, np.random.default_rng(row_bytes))
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        got, stats = feed(x, 8, "auto", monkeypatch, shuffle=True, seed=1)
    check_batches(got, x, Sampler(n, 8, shuffle=True, seed=1))
    assert not gather_records(caplog)  # small rows on the host are the choice, not a refusal
    assert stats["gather"]["x"] == expected


@pytest.mark.gpu
def test_after_a_device_gather_gets_and_a_graphs_host_reads_are_bit_exact(monkeypatch, caplog):
    # Seen on an H200 when the gather locked whole pages: q.get() and Theano's HostFromGpu copy device to
    # host into fresh numpy memory next to the dataset's on the heap, and the driver refused
    # (CUDA_ERROR_INVALID_VALUE) a buffer that started in a locked page and ran past it.
    import theano

    monkeypatch.setenv("THEANO_QUEUE_GATHER", "batch")
    for attempt in range(5):
        rng = np.random.default_rng(attempt)
        x = rng.standard_normal((64, 300)).astype("float32")  # small arrays: on the heap, among others
        labels = rng.integers(0, 1000, 64).astype("int64")
        q = tq.Queue([("x", "float32", (8, 300)), ("y", "int64", (8,))], capacity=3)
        f = theano.function([], q.dequeue())  # GpuDequeue; its outputs are read back to the host
        sampler = Sampler(64, 8, shuffle=True, seed=attempt, epochs=3)  # whole batches only
        with caplog.at_level(logging.INFO, logger="theano_queue"):
            with tq.Feeder(q, (x, labels), shuffle=True, seed=attempt, epochs=3) as feeder:
                for position in range(sampler.batches_per_epoch * 3):
                    xb, yb = q.get(timeout=60) if position % 2 else f()
                    picked = sampler.batch(position)
                    assert xb.tobytes() == x[picked].tobytes() and yb.tolist() == labels[picked].tolist()
        assert feeder.stats()["gather"]["x"] == "batch"
        assert not gather_records(caplog)


@pytest.mark.gpu
def test_a_registered_dataset_and_two_queues_share_one_page_lock(monkeypatch, caplog):
    x = np.random.default_rng(2).standard_normal((300, 65)).astype("float32")
    first = tq.Queue([("x", "float32", (32, 65)), ("i", "int64", (32,))], capacity=3)
    other = tq.Queue([("x", "float32", (32, 65)), ("i", "int64", (32,))], capacity=3)
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        first.register_host(x)  # a dataset the user page-locked is used as it is, by this queue or another
        try:
            for q in (first, other):
                got, stats = feed(x, 32, "batch", monkeypatch, q=q, shuffle=True)
                check_batches(got, x, Sampler(300, 32, shuffle=True))
                assert stats["gather"]["x"] == "batch"
        finally:
            first.unregister_host(x)
        # Two queues fed from one dataset at once: it is locked once, and stays until both end.
        monkeypatch.setenv("THEANO_QUEUE_GATHER", "batch")
        queues = [tq.Queue([("x", "float32", (32, 65)), ("i", "int64", (32,))], capacity=3) for _ in range(2)]
        feeders = [tq.Feeder(q, (x, np.arange(300)), shuffle=True, seed=s).start() for s, q in enumerate(queues)]
        results = [drain(q) for q in queues]
        for s, (feeder, got) in enumerate(zip(feeders, results)):
            feeder.close()
            check_batches(got, x, Sampler(300, 32, shuffle=True, seed=s))
            assert feeder.stats()["gather"]["x"] == "batch"
        # And register_host of memory a running gather locked.
        fed, put = [tq.Queue([("x", "float32", (32, 65)), ("i", "int64", (32,))], capacity=3) for _ in range(2)]
        with tq.Feeder(fed, (x, np.arange(300)), shuffle=True, seed=5) as feeder:
            put.register_host(x)
            put.put(x[:32], np.arange(32))
            assert put.get(timeout=60)[0].tobytes() == x[:32].tobytes()
            put.unregister_host(x)
            check_batches(drain(fed), x, Sampler(300, 32, shuffle=True, seed=5))
        assert feeder.stats()["gather"]["x"] == "batch"
    assert not gather_records(caplog), gather_records(caplog)[0].getMessage()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_memory_mapped_file_is_gathered_exactly_wherever_it_is_gathered(mode, tmp_path, monkeypatch, caplog):
    x = np.random.default_rng(3).standard_normal((2000, 784)).astype("float32")
    path = str(tmp_path / "x.f32")
    x.tofile(path)
    mapped = np.memmap(path, dtype="float32", mode=mode, shape=x.shape)
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        got, stats = feed(mapped, 256, "batch", monkeypatch, shuffle=True)  # locked read-only for mode "r"
    check_batches(got, x, Sampler(2000, 256, shuffle=True))
    records = gather_records(caplog)
    # Whether the driver page-locks a file mapping is the driver's to say: either the device gathers,
    # or exactly one line says why not.
    assert (stats["gather"]["x"] == "host") == (len(records) == 1) and len(records) <= 1
    print(
        "np.memmap mode %r: gathered by %s%s"
        % (mode, stats["gather"], ": " + records[0].getMessage() if records else "")
    )
