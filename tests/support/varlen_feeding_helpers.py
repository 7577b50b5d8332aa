"""What tests/cpu/test_varlen_feeding.py and tests/gpu/test_varlen_feeding_gpu.py share."""

import numpy as np
from ragged import padded
from worker_datasets import ragged_sample


def expected_ragged(indices):
    tokens, labels = zip(*(ragged_sample(int(i)) for i in indices))
    data, lengths = padded(list(tokens), pad=0)
    return data, np.array(labels, np.int64), lengths
