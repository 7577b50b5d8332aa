"""Sampler and Cursor: which samples go into which batch, and where a run resumes."""

import itertools
import pickle

import numpy as np
import pytest

from theano_queue.sampler import Cursor, Sampler, split_rows


def distributed_sampler(n, rank, world, order, drop_last):
    """torch.utils.data.DistributedSampler's indices for one epoch, written out from its documentation."""
    indices = list(order)
    if drop_last and n % world:
        num_samples = -(-(n - world) // world)
    else:
        num_samples = -(-n // world)
    total = num_samples * world
    if not drop_last:
        pad = total - len(indices)
        if pad <= len(indices):
            indices += indices[:pad]
        else:
            indices += (indices * -(-pad // max(1, len(indices))))[:pad]
    else:
        indices = indices[:total]
    return indices[rank:total:world]


def run(sampler):
    return [sampler.batch(p).tolist() for p in sampler.pending(Cursor())]


def test_in_order_with_a_partial_last_batch_per_epoch():
    s = Sampler(10, 4, epochs=2)
    assert s.batches_per_epoch == 3 and s.total == 6
    assert run(s) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] * 2


def test_drop_last_drops_the_partial_batch():
    s = Sampler(10, 4, drop_last=True)
    assert run(s) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_shuffle_is_a_permutation_per_epoch_reproducible_from_the_seed():
    s = Sampler(50, 7, shuffle=True, seed=3, epochs=3)
    epochs = [s.epoch_indices(e).tolist() for e in range(3)]
    assert all(sorted(e) == list(range(50)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2], "every epoch has its own order"
    again = Sampler(50, 7, shuffle=True, seed=3, epochs=3)
    assert [again.epoch_indices(e).tolist() for e in range(3)] == epochs
    assert Sampler(50, 7, shuffle=True, seed=4).epoch_indices(0).tolist() != epochs[0]
    flat = list(itertools.chain.from_iterable(run(s)))
    assert flat == list(itertools.chain.from_iterable(epochs))


@pytest.mark.parametrize("n", [0, 1, 2, 5, 10, 11, 12, 13])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_are_distributed_sampler_semantics(n, world, drop_last, shuffle):
    order = Sampler(n, 4, shuffle=shuffle, seed=9).epoch_indices(5).tolist()
    shards = [
        Sampler(n, 4, shuffle=shuffle, seed=9, shard=(r, world), drop_last=drop_last).epoch_indices(5).tolist()
        for r in range(world)
    ]
    for rank, shard in enumerate(shards):
        assert shard == distributed_sampler(n, rank, world, order, drop_last)
    assert len({len(shard) for shard in shards}) == 1, "equal-sized shards"
    everything = sorted(itertools.chain.from_iterable(shards))
    if drop_last or n % world == 0:
        assert len(set(everything)) == len(everything), "disjoint"
    if not drop_last:
        assert set(everything) == set(range(n)), "complete"
    else:
        assert len(everything) == n - n % world


def test_resume_state_round_trips_through_pickle_and_checks_its_settings():
    s = Sampler(100, 8, shuffle=True, seed=1, shard=(1, 3), epochs=4)
    cursor = Cursor()
    for p in [0, 1, 2, 4, 7]:
        cursor.add(p)
    state = pickle.loads(pickle.dumps(s.state_dict(cursor)))
    assert state["position"] == 3 and state["done"] == [4, 7]
    assert (state["epoch"], state["batch"]) == divmod(3, s.batches_per_epoch)
    back = s.cursor(state)
    assert list(itertools.islice(s.pending(back), 4)) == [3, 5, 6, 8]
    with pytest.raises(ValueError, match=r"seed: saved 1, this Feeder has 2 \(give seed=1\)"):
        Sampler(100, 8, shuffle=True, seed=2, shard=(1, 3)).cursor(state)
    with pytest.raises(ValueError, match="length: saved 100, this Feeder has 99"):
        Sampler(99, 8, shuffle=True, seed=1, shard=(1, 3)).cursor(state)
    with pytest.raises(ValueError, match="map-style"):
        s.cursor({"kind": "iterable", "consumed": [3]})


def test_cursor_takes_positions_out_of_order():
    c = Cursor()
    for p in [2, 0, 5, 1]:
        c.add(p)
    assert (c.low, c.above) == (3, {5})
    assert 1 in c and 5 in c and 3 not in c
    assert list(c.pending(8)) == [3, 4, 6, 7]


def test_forever_and_empty():
    s = Sampler(5, 2, epochs=None)
    assert s.total is None
    assert list(itertools.islice(s.pending(Cursor()), 7)) == list(range(7))
    assert s.batch(9).tolist() == [0, 1] and s.batch(11).tolist() == [4]
    assert Sampler(0, 2, epochs=None).total == 0
    assert Sampler(3, 4, drop_last=True, epochs=None).total == 0


@pytest.mark.parametrize(
    "bad", [dict(shard=(2, 2)), dict(shard=(0, 0)), dict(seed=-1), dict(batch_size=0), dict(epochs=-1), dict(shard=3)]
)
def test_bad_settings(bad):
    settings = dict(length=10, batch_size=2)
    settings.update(bad)
    with pytest.raises(ValueError):
        Sampler(**settings)


def test_split_rows():
    assert split_rows(256, 14)[0] == (0, 18) and split_rows(256, 14)[-1][1] == 256
    assert split_rows(3, 8) == [(0, 1), (1, 2), (2, 3)]
    for rows, parts in [(1, 1), (7, 3), (256, 4), (5, 5)]:
        ranges = split_rows(rows, parts)
        assert ranges[0][0] == 0 and ranges[-1][1] == rows
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        sizes = [b - a for a, b in ranges]
        assert max(sizes) - min(sizes) <= 1
    assert np.sum([b - a for a, b in split_rows(1000, 7)]) == 1000


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("n,world,drop_last", [(10, 1, False), (11, 3, False), (11, 3, True), (2, 4, False)])
def test_batches_are_the_epochs_order_cut_in_pieces(shuffle, n, world, drop_last):
    for rank in range(world):
        s = Sampler(n, 3, shuffle=shuffle, seed=2, shard=(rank, world), drop_last=drop_last, epochs=2)
        for p in range(s.total):
            epoch, b = divmod(p, s.batches_per_epoch)
            assert s.batch(p).tolist() == s.epoch_indices(epoch)[3 * b : 3 * b + 3].tolist()
