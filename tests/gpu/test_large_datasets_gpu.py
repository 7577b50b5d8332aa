"""An array dataset of more than 2^31 rows feeds a GPU queue exactly (issue 40, item 5): rows past 2^31 of a
sparse memmap reach the device as they were written.  tests/cpu/test_large_datasets.py runs the same on a CPU
queue.  Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_large_datasets_gpu.py``."""

import numpy as np
import pytest
from helpers import drain

import theano_queue as tq
from theano_queue.feed.sampler import Sampler

pytestmark = pytest.mark.gpu

BIG = 2**31 + 100
WORLD = 2**20  # shards of 2049 rows
BATCH = 256


@pytest.mark.parametrize("shuffle, seed", [(False, 0), (True, 54)])  # 54: a shuffled shard with a row past 2^31
def test_rows_past_2_31_reach_a_gpu_queue_exactly(tmp_path, shuffle, seed):
    rows = np.lib.format.open_memmap(str(tmp_path / "rows.npy"), mode="w+", dtype=np.uint8, shape=(BIG,))
    mine = Sampler(BIG, BATCH, shuffle=shuffle, seed=seed, shard=(37, WORLD)).order(0)
    assert (mine >= 2**31).any()
    rows[mine] = ((mine % 251) + 1).astype(np.uint8)
    rows.flush()
    q = tq.Queue([("b", "uint8", (BATCH,))], capacity=4)
    assert q.on_gpu
    with tq.Feeder(q, (rows,), shuffle=shuffle, seed=seed, shard=(37, WORLD)):
        got = drain(q)
    assert np.concatenate([np.asarray(b) for (b,) in got]).tolist() == rows[mine].tolist()
