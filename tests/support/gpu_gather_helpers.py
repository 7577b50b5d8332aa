"""What tests/cpu/test_gpu_gather.py and tests/gpu/test_gpu_gather_gpu.py share."""

import numpy as np


def gather_records(caplog):
    return [r for r in caplog.records if r.name == "theano_queue" and "gathered on the host" in r.getMessage()]


def check_batches(got, x, sampler):
    assert len(got) == sampler.batches_per_epoch * sampler.epochs
    for position, (xb, ids) in enumerate(got):
        np.testing.assert_array_equal(ids, sampler.batch(position))
        assert xb.tobytes() == x[ids].tobytes()  # bit-exact, NaN payloads included
