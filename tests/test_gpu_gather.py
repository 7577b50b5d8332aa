"""The GPU gather of array datasets (doc/design.rst, "The GPU gather"): the
device reads an array dataset's rows from page-locked, mapped host memory
itself (an NVRTC kernel or cuMemcpyBatchAsync), and where it cannot, the rows
are gathered on the host with one log line saying why.

The GPU tests compare every batch with numpy's rows for each mechanism
(forced through THEANO_QUEUE_GATHER, the benchmarks' switch); run them on a
GPU with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/test_gpu_gather.py``.
"""
import logging

import numpy as np
import pytest

import theano_queue as tq
from theano_queue.sampler import Sampler
from theano_queue.target import Target

MECHANISMS = ["kernel", "batch", "host"]


def drain(q):
    got = []
    while True:
        try:
            got.append(q.get(timeout=60))
        except tq.QueueClosed:
            return got


def gather_records(caplog):
    return [r for r in caplog.records if r.name == "theano_queue" and "gathered on the host" in r.getMessage()]


def feed(x, batch, mechanism, monkeypatch, q=None, **feeder_args):
    """Every element a Feeder over (x, row numbers) puts into q (a fresh GPU queue), and the feeder's stats."""
    monkeypatch.setenv("THEANO_QUEUE_GATHER", mechanism)
    if q is None:
        q = tq.Queue([("x", x.dtype, (batch,) + x.shape[1:]), ("i", "int64", (batch,))], capacity=3)
    with tq.Feeder(q, (x, np.arange(len(x))), **feeder_args) as feeder:
        got = drain(q)
    return got, feeder.stats()


def check_batches(got, x, sampler):
    assert len(got) == sampler.batches_per_epoch * sampler.epochs
    for position, (xb, ids) in enumerate(got):
        np.testing.assert_array_equal(ids, sampler.batch(position))
        assert xb.tobytes() == x[ids].tobytes()  # bit-exact, NaN payloads included


def unaligned(shape, dtype, skew, rng):
    """Random bytes viewed as an array that starts `skew` bytes past an aligned address."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + skew
    raw[:] = rng.integers(0, 256, size=raw.size, dtype=np.uint8)
    return raw[start:start + nbytes].view(dtype).reshape(shape)


# ---- without a GPU ------------------------------------------------------------------------


def test_a_queue_that_cannot_gather_on_its_device_logs_one_line_and_gathers_on_the_host(monkeypatch, caplog):
    x = np.arange(50 * 3, dtype="float32").reshape(50, 3)
    q = tq.Queue([("x", "float32", (8, 3)), ("i", "int64", (8,))], capacity=3, target="cpu")
    # A GPU queue whose ring refuses the device gather: a host ring says it gathers on the host only.
    q._target = Target("gpu", True)
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        with tq.Feeder(q, (x, np.arange(50)), shuffle=True, seed=1) as feeder:
            got = drain(q)
    check_batches(got, x, Sampler(50, 8, shuffle=True, seed=1))
    records = gather_records(caplog)
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "Feeder(%s)" % q.name in records[0].getMessage()
    assert "gathers rows on the host only" in records[0].getMessage()  # the reason
    assert feeder.stats()["gather"] == "host"


def test_a_host_queue_gathers_on_the_host_without_a_word(caplog):
    x = np.ones((20, 4), dtype="float32")
    q = tq.Queue([("x", "float32", (8, 4)), ("i", "int64", (8,))], capacity=2, target="cpu")
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        with tq.Feeder(q, (x, np.arange(20))) as feeder:
            drain(q)
    assert not gather_records(caplog) and feeder.stats()["gather"] == "host"


def test_an_unknown_gather_mechanism_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("THEANO_QUEUE_GATHER", "dma")
    q = tq.Queue([("x", "float32", (8, 4))], capacity=2, target="cpu")
    with pytest.raises(ValueError, match="THEANO_QUEUE_GATHER must be one of auto, kernel, batch, host, got 'dma'"):
        tq.Feeder(q, (np.ones((20, 4), dtype="float32"),))


# ---- on a GPU ------------------------------------------------------------------------------


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
    assert stats["gather"] == mechanism


@pytest.mark.gpu
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_in_order_shards_epochs_and_partial_batches(mechanism, monkeypatch):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1001, 33)).astype("float32")  # rows of 132 bytes: 4-byte words
    for shuffle in (False, True):
        got, stats = feed(x, 100, mechanism, monkeypatch, shuffle=shuffle, seed=3, shard=(1, 3), epochs=2)
        check_batches(got, x, Sampler(1001, 100, shuffle=shuffle, seed=3, shard=(1, 3), epochs=2))
        assert stats["gather"] == mechanism


@pytest.mark.gpu
def test_the_default_gathers_on_the_device(monkeypatch):
    x = np.random.default_rng(1).standard_normal((500, 784)).astype("float32")
    got, stats = feed(x, 128, "auto", monkeypatch, shuffle=True)
    check_batches(got, x, Sampler(500, 128, shuffle=True))
    assert stats["gather"] in ("kernel", "batch")


@pytest.mark.gpu
@pytest.mark.parametrize("mechanism", ["kernel", "batch"])
def test_a_registered_dataset_and_two_queues_share_one_page_lock(mechanism, monkeypatch):
    x = np.random.default_rng(2).standard_normal((300, 65)).astype("float32")
    first = tq.Queue([("x", "float32", (32, 65)), ("i", "int64", (32,))], capacity=3)
    first.register_host(x)  # a dataset the user page-locked for this queue is used as it is
    try:
        got, stats = feed(x, 32, mechanism, monkeypatch, q=first, shuffle=True)
        check_batches(got, x, Sampler(300, 32, shuffle=True))
        assert stats["gather"] == mechanism
    finally:
        first.unregister_host(x)
    # Two queues fed from one dataset at once: the pages are locked once, and stay until both end.
    monkeypatch.setenv("THEANO_QUEUE_GATHER", mechanism)
    queues = [tq.Queue([("x", "float32", (32, 65)), ("i", "int64", (32,))], capacity=3) for _ in range(2)]
    feeders = [tq.Feeder(q, (x, np.arange(300)), shuffle=True, seed=s).start() for s, q in enumerate(queues)]
    results = [drain(q) for q in queues]
    for s, (feeder, got) in enumerate(zip(feeders, results)):
        feeder.close()
        check_batches(got, x, Sampler(300, 32, shuffle=True, seed=s))
        assert feeder.stats()["gather"] == mechanism


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_memory_mapped_file_is_gathered_exactly_wherever_it_is_gathered(mode, tmp_path, monkeypatch, caplog):
    x = np.random.default_rng(3).standard_normal((2000, 784)).astype("float32")
    path = str(tmp_path / "x.f32")
    x.tofile(path)
    mapped = np.memmap(path, dtype="float32", mode=mode, shape=x.shape)
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        got, stats = feed(mapped, 256, "auto", monkeypatch, shuffle=True)
    check_batches(got, x, Sampler(2000, 256, shuffle=True))
    records = gather_records(caplog)
    # Whether the driver page-locks a file mapping is the driver's to say: either the device gathers,
    # or exactly one line says why not.
    assert (stats["gather"] == "host") == (len(records) == 1) and len(records) <= 1
    print("np.memmap mode %r: gathered by %s%s" % (mode, stats["gather"],
                                                    ": " + records[0].getMessage() if records else ""))
