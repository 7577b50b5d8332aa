"""Variable-length axes (tq.upto) fed: the Feeder's producers, bucketing, and GpuDequeue/GpuEnqueue.

The GPU tests are in tests/gpu/test_varlen_feeding_gpu.py; they run where Theano runs on CUDA
(THEANO_FLAGS=device=cuda0): ``pytest tests/gpu/test_varlen_feeding_gpu.py``.
"""

import collections

import numpy as np
import pytest
from helpers import drain
from ragged import padded
from varlen_feeding_helpers import expected_ragged
from worker_datasets import BOUND, RAGGED_SPEC, ROWS, Ragged, ragged_length, ragged_sample

import theano_queue as tq

# ---- the Feeder ---------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_map_style_dataset_of_ragged_samples_is_packed_by_the_feeder(workers):
    q = tq.Queue(RAGGED_SPEC, capacity=3, target="cpu")
    dataset = Ragged(45)
    with tq.Feeder(q, dataset, workers=workers, start_method="fork" if workers else None):
        got = drain(q, lengths=True)
    assert len(got) == 6
    for b, (tokens, labels, lengths) in enumerate(got):
        want_tokens, want_labels, want_lengths = expected_ragged(range(b * ROWS, min(45, (b + 1) * ROWS)))
        assert np.array_equal(labels, want_labels)
        assert np.array_equal(lengths, want_lengths)
        assert tokens.shape == want_tokens.shape and np.array_equal(tokens, want_tokens)


def test_worker_processes_pack_ragged_samples_out_of_order_too():
    q = tq.Queue(RAGGED_SPEC, capacity=3, target="cpu")
    with tq.Feeder(q, Ragged(64), workers=3, ordered=False, start_method="fork"):
        got = drain(q, lengths=True)
    seen = collections.Counter()
    for tokens, labels, lengths in got:
        want_tokens, _, want_lengths = expected_ragged(labels)
        assert np.array_equal(lengths, want_lengths) and np.array_equal(tokens, want_tokens)
        seen.update(labels.tolist())
    assert seen == collections.Counter(range(64))


def test_an_iterable_yields_lists_of_rows_or_padded_values():
    q = tq.Queue(RAGGED_SPEC, capacity=2, target="cpu")
    rows = [np.arange(n, dtype="int32") for n in (3, 0, 12)]
    batches = [(rows, np.arange(3)), (tq.Padded(*padded(rows, pad=9)), np.arange(3))]
    with tq.Feeder(q, batches):
        got = drain(q, lengths=True)
    for tokens, labels, lengths in got:
        assert np.array_equal(tokens, padded(rows, pad=0)[0]) and np.array_equal(lengths, [3, 0, 12])


def test_an_iterable_in_worker_processes_packs_in_the_worker():
    q = tq.Queue(RAGGED_SPEC, capacity=2, target="cpu")
    rows = [np.arange(n, dtype="int32") for n in (3, 0, 12)]
    with tq.Feeder(q, [(rows, np.arange(3))] * 4, workers=2, start_method="fork"):
        got = drain(q, lengths=True)
    assert len(got) == 4 and all(np.array_equal(t, padded(rows, pad=0)[0]) for t, _, _ in got)


def test_a_ragged_sample_longer_than_the_bound_fails_the_feeder_with_the_component():
    class TooLong(Ragged):
        def __getitem__(self, i):
            return (np.zeros(BOUND + 1, np.int32), np.int64(i)) if i == 5 else ragged_sample(i)

    q = tq.Queue(RAGGED_SPEC, capacity=3, target="cpu")
    with tq.Feeder(q, TooLong(16)):
        with pytest.raises(tq.FeederError, match="sample 5 .*component 'tokens': a sample of length 13 .* upto"):
            drain(q, lengths=True)


def test_a_fill_function_gets_the_lengths_views_after_the_components():
    q = tq.Queue(RAGGED_SPEC, capacity=2, target="cpu")
    calls = iter(range(2))

    def fill(tokens, label, tokens_lengths):
        i = next(calls)
        tokens[0, :2] = [i, i]
        tokens_lengths[:1] = 2
        label[:1] = i
        return 1

    with tq.Feeder(q, fill=fill):
        got = drain(q, lengths=True)
    assert [g[0].tolist() for g in got] == [[[0, 0]], [[1, 1]]]


def test_array_datasets_and_read_into_are_refused_for_variable_components():
    q = tq.Queue(RAGGED_SPEC, target="cpu", name="r")
    with pytest.raises(TypeError, match="Feeder\\(r\\): an array dataset holds rows of one shape.*'tokens'"):
        tq.Feeder(q, (np.zeros((8, 12), np.int32), np.zeros(8, np.int64)))

    class Decoding(Ragged):
        def read_into(self, i, row):
            pass

    with pytest.raises(TypeError, match="read_into.* 'tokens'"):
        tq.Feeder(q, Decoding(8))


# ---- bucketing ------------------------------------------------------------------------------


def bucketed_run(seed, epochs=2, state=None, take=None, **kwargs):
    q = tq.Queue(RAGGED_SPEC, capacity=4, target="cpu")
    feeder = tq.Feeder(
        q,
        Ragged(203),
        shuffle=True,
        seed=seed,
        epochs=epochs,
        state=state,
        bucket_by=lambda sample: len(sample[0]),
        **kwargs,
    )
    batches = []
    with feeder:
        while take is None or len(batches) < take:
            try:
                batches.append(q.get(lengths=True)[1:])
            except tq.QueueClosed:
                break
        saved = feeder.state_dict()
    return [(labels.tolist(), lengths.tolist()) for labels, lengths in batches], saved


def spread(batches):
    """Mean over full batches of (longest - shortest) length within the batch."""
    return np.mean([max(lengths) - min(lengths) for _, lengths in batches if len(lengths) == ROWS])


def test_bucketing_is_deterministic_exactly_once_and_groups_similar_lengths():
    run, _ = bucketed_run(seed=3)
    assert run == bucketed_run(seed=3)[0]
    assert run != bucketed_run(seed=4)[0]
    per_epoch = -(-203 // ROWS)
    assert len(run) == 2 * per_epoch
    for epoch in (run[:per_epoch], run[per_epoch:]):
        labels = [label for batch, _ in epoch for label in batch]
        assert sorted(labels) == list(range(203))  # every sample once per epoch
        for batch, lengths in epoch:
            assert lengths == [ragged_length(i) for i in batch]
    assert run[:per_epoch] != run[per_epoch:]  # each epoch its own order
    plain = tq.Queue(RAGGED_SPEC, capacity=4, target="cpu")
    with tq.Feeder(plain, Ragged(203), shuffle=True, seed=3):
        unbucketed = [(g[1].tolist(), g[2].tolist()) for g in drain(plain, lengths=True)]
    assert spread(run) < spread(unbucketed) / 3


def test_bucketing_within_a_window_of_one_batch_keeps_the_batches_and_sorts_inside():
    run, _ = bucketed_run(seed=5, epochs=1, bucket_window=1)
    plain = tq.Queue(RAGGED_SPEC, capacity=4, target="cpu")
    with tq.Feeder(plain, Ragged(203), shuffle=True, seed=5):
        unbucketed = [g[1].tolist() for g in drain(plain, lengths=True)]
    assert [sorted(b) for b, _ in run] == [sorted(b) for b in unbucketed]
    assert all(lengths == sorted(lengths) for _, lengths in run)


def test_bucketed_runs_resume_where_the_consumer_was():
    whole, _ = bucketed_run(seed=6)
    first, saved = bucketed_run(seed=6, take=11)
    assert saved["bucket_window"] == 16
    rest, _ = bucketed_run(seed=6, state=saved)
    assert first + rest == whole
    with pytest.raises(ValueError, match="bucket_window: saved 16, this Feeder has 4"):
        bucketed_run(seed=6, state=saved, bucket_window=4)


def test_bucket_by_an_array_of_lengths_and_in_worker_processes():
    lengths = np.array([ragged_length(i) for i in range(203)])
    run, _ = bucketed_run(seed=3)
    q = tq.Queue(RAGGED_SPEC, capacity=4, target="cpu")
    with tq.Feeder(q, Ragged(203), shuffle=True, seed=3, epochs=2, bucket_by=lengths, workers=2, start_method="fork"):
        got = [(g[1].tolist(), g[2].tolist()) for g in drain(q, lengths=True)]
    assert got == run


def test_an_array_dataset_of_a_fixed_queue_is_bucketed_too():
    lengths = np.arange(64) % 9
    q = tq.Queue([("x", "int64", (8,)), ("n", "int64", (8,))], capacity=3, target="cpu")
    with tq.Feeder(q, (np.arange(64), lengths), shuffle=True, seed=1, bucket_by=lengths, bucket_window=8):
        got = [q.get() for _ in range(8)]
    assert sorted(np.concatenate([x for x, _ in got]).tolist()) == list(range(64))
    assert all(np.array_equal(n, lengths[x]) for x, n in got)
    assert max(int(n.max() - n.min()) for _, n in got) <= 1  # 64 samples over 9 lengths, sorted


def test_bucket_by_is_refused_for_iterables_and_checked():
    q = tq.Queue(RAGGED_SPEC, target="cpu", name="b")
    with pytest.raises(ValueError, match="Feeder\\(b\\): bucket_by groups the samples of a map-style"):
        tq.Feeder(q, [([[1]], [1])], bucket_by=len)
    with pytest.raises(ValueError, match="bucket_by must be a function of a sample or an int array of the 8"):
        tq.Feeder(q, Ragged(8), bucket_by=np.zeros(3, np.int64))


# ---- GPU: GpuDequeue, GpuEnqueue -----------------------------------------------------------------
