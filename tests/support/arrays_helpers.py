"""What tests/cpu/test_arrays.py and tests/gpu/test_arrays_gpu.py share."""

import numpy as np


def rows_of(got):
    return [int(i) for _, ids in got for i in ids]


def check_bit_exact(got, x):
    for xb, ids in got:
        np.testing.assert_array_equal(xb, x[ids])
