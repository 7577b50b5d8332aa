"""Queues fed from a Ray Data dataset (examples/ray_feed.py) on a local Ray runtime:
streaming_split per rank, iter_batches(batch_format="numpy") as each Feeder's source."""

import importlib.util
import os

import pytest

ray = pytest.importorskip("ray", reason="Ray is in the test extras: pip install -e '.[test]'")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples", "ray_feed.py")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("ray_feed", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield module
    ray.shutdown()


def test_ranks_get_disjoint_equal_parts_of_every_epoch(example, capsys):
    rows, world, epochs = 1000, 2, 2
    seen = example.run(world, rows, batch_size=64, epochs=epochs)
    per_epoch = rows // world
    for epoch in range(epochs):
        parts = [seen[rank][epoch * per_epoch : (epoch + 1) * per_epoch] for rank in range(world)]
        assert all(len(part) == per_epoch for part in parts)
        assert set(parts[0]).isdisjoint(parts[1])
        assert sorted(parts[0] + parts[1]) == list(range(rows))
    assert all(len(ids) == epochs * per_epoch for ids in seen.values())
    out = capsys.readouterr().out
    assert "rank 0 epoch 1: 500 rows" in out and "rank 1 epoch 1: 500 rows" in out


def test_a_split_batch_is_a_feeder_element(example):
    """The dicts iter_batches gives, keyed by component name, go into the queue as they are."""
    import numpy as np

    import theano_queue as tq

    (split,) = example.make_dataset(100).streaming_split(1)
    q = example.rank_queue(0, 32)
    with tq.Feeder(q, example.rank_batches(split, 32)):
        sizes = []
        while True:
            try:
                x, y, ids = q.get()
            except tq.QueueClosed:
                break
            assert x.dtype == np.float32 and y.dtype == np.int32 and len(x) == len(y) == len(ids)
            sizes.append(len(ids))
    assert sum(sizes) == 100 and max(sizes) <= 32  # the last batch may be partial


# Ray's reader thread for the live rank waits for the dead rank's split until ray.shutdown ends it.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failing_rank_stops_the_others_instead_of_hanging_them(example, monkeypatch):
    """A rank that dies would leave the others waiting for it at the split's epoch barrier."""
    train_rank = example.train_rank

    def rank1_breaks(rank, *args):
        if rank == 1:
            raise RuntimeError("rank 1 lost its GPU")
        return train_rank(rank, *args)

    monkeypatch.setattr(example, "train_rank", rank1_breaks)
    with pytest.warns(RuntimeWarning, match="still running"):
        with pytest.raises(RuntimeError, match="rank 1 lost its GPU"):
            example.run(2, 1000, batch_size=64, epochs=2)
