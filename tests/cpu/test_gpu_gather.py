"""The GPU gather of array datasets (doc/design.rst, "The GPU gather"): the
device copies the rows of an array dataset's components with large rows
(256 KiB or more) from page-locked host memory itself (cuMemcpyBatchAsync),
the host gathers the rest, and where the device cannot, the rows are
gathered on the host with one log line saying why.

The GPU tests (tests/gpu/test_gpu_gather_gpu.py) compare every batch with numpy's rows for each mechanism
(forced through THEANO_QUEUE_GATHER, the benchmarks' switch); run them on a
GPU with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_gpu_gather_gpu.py``.
"""

import logging

import numpy as np
import pytest
from gpu_gather_helpers import check_batches, gather_records
from helpers import drain
from pretend import pretend_gpu

import theano_queue as tq
from theano_queue.sampler import Sampler

# ---- without a GPU ------------------------------------------------------------------------


def test_a_queue_that_cannot_gather_on_its_device_logs_one_line_and_gathers_on_the_host(monkeypatch, caplog):
    x = np.arange(50 * 3, dtype="float32").reshape(50, 3)
    q = tq.Queue([("x", "float32", (8, 3)), ("i", "int64", (8,))], capacity=3, target="cpu")
    # A GPU queue whose ring refuses the device gather: a host ring says it gathers on the host only.
    pretend_gpu(q)
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        with tq.Feeder(q, (x, np.arange(50)), shuffle=True, seed=1) as feeder:
            got = drain(q)
    check_batches(got, x, Sampler(50, 8, shuffle=True, seed=1))
    records = gather_records(caplog)
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "Feeder(%s)" % q.name in records[0].getMessage()
    assert "gathers rows on the host only" in records[0].getMessage()  # the reason
    assert feeder.stats()["gather"] == {"x": "host", "i": "host"}


def test_a_host_queue_gathers_on_the_host_without_a_word(caplog):
    x = np.ones((20, 4), dtype="float32")
    q = tq.Queue([("x", "float32", (8, 4)), ("i", "int64", (8,))], capacity=2, target="cpu")
    with caplog.at_level(logging.INFO, logger="theano_queue"):
        with tq.Feeder(q, (x, np.arange(20))) as feeder:
            drain(q)
    assert not gather_records(caplog) and feeder.stats()["gather"] == {"x": "host", "i": "host"}


def test_an_unknown_gather_mechanism_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("THEANO_QUEUE_GATHER", "kernel")  # the NVRTC kernel lost to the host gather: gone
    q = tq.Queue([("x", "float32", (8, 4))], capacity=2, target="cpu")
    with pytest.raises(ValueError, match="THEANO_QUEUE_GATHER must be one of auto, batch, host, got 'kernel'"):
        tq.Feeder(q, (np.ones((20, 4), dtype="float32"),))


# ---- on a GPU ------------------------------------------------------------------------------
