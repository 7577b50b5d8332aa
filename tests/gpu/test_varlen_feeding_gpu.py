"""The GPU half of tests/cpu/test_varlen_feeding.py: GpuDequeue/GpuEnqueue and workers with variable-length rows.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_varlen_feeding_gpu.py``."""

import numpy as np
import pytest
from helpers import drain
from ragged import PAD, SPEC, check_element, padded, ragged_batch
from varlen_feeding_helpers import expected_ragged
from worker_datasets import RAGGED_SPEC, ROWS, Ragged

import theano_queue as tq

pytestmark = pytest.mark.gpu


@pytest.mark.gpu
def test_gpu_dequeue_is_bit_exact_with_zero_length_rows_and_empty_elements():
    import theano

    q = tq.Queue(SPEC, capacity=3, pad_value={"tokens": PAD})
    assert q.on_gpu
    image, tokens, label, lengths = q.dequeue(lengths=True)
    f = theano.function([], [image, tokens, label, lengths, tokens.sum(dtype="int64")])
    nodes = [type(n.op).__name__ for n in f.maker.fgraph.toposort()]
    assert "GpuDequeue" in nodes and "Dequeue" not in nodes
    rng = np.random.default_rng(7)
    batches = [ragged_batch(rng, rows=int(rng.integers(1, 9))) for _ in range(200)]
    batches.append((np.zeros((2, 3), np.uint8), [[], []], np.arange(2)))  # extent 0: zero data bytes
    batches.append((np.zeros((0, 3), np.uint8), [], np.zeros(0, np.int64)))  # no rows
    with tq.Feeder(q, batches):
        for i, (image_b, rows, label_b) in enumerate(batches):
            *got, total = f()
            check_element(got, image_b, [np.asarray(r, np.int32) for r in rows], label_b)
            assert total == padded([np.asarray(r, np.int32) for r in rows])[0].astype(np.int64).sum(), i


@pytest.mark.gpu
def test_gpu_enqueue_with_lengths_into_a_gpu_queue():
    import theano

    src = tq.Queue(SPEC, capacity=3, pad_value={"tokens": PAD})
    dst = tq.Queue(SPEC, capacity=3, pad_value={"tokens": PAD})
    image, tokens, label, lengths = src.dequeue(lengths=True)
    relay = theano.function([], dst.enqueue(image, tokens * 2, label, lengths={"tokens": lengths}))
    assert "GpuEnqueue" in [type(n.op).__name__ for n in relay.maker.fgraph.toposort()]
    rng = np.random.default_rng(8)
    for _ in range(20):
        image_b, rows, label_b = ragged_batch(rng, rows=int(rng.integers(1, 9)))
        rows = [(r // 4).astype("int32") for r in rows]
        src.put(image_b, rows, label_b)
        relay()
        check_element(dst.get(lengths=True), image_b, [r * 2 for r in rows], label_b)


@pytest.mark.gpu
def test_gpu_feeder_workers_pack_ragged_samples():
    q = tq.Queue(RAGGED_SPEC, capacity=3)
    assert q.on_gpu
    with tq.Feeder(q, Ragged(45), workers=2):
        got = drain(q, lengths=True)
    for b, (tokens, labels, lengths) in enumerate(got):
        want_tokens, want_labels, want_lengths = expected_ragged(range(b * ROWS, min(45, (b + 1) * ROWS)))
        assert np.array_equal(tokens, want_tokens) and np.array_equal(lengths, want_lengths)
