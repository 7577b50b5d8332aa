"""Datasets the PyTensor tests feed from worker processes: importable without PyTensor (workers start fast)."""

import numpy as np


class Squares:
    """A map-style dataset: sample i is (i as a float row, i * i)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full(3, i, "float32"), np.int64(i * i)


class Broken(Squares):
    def __getitem__(self, i):
        if i == 5:
            raise RuntimeError("sample 5 is broken")
        return super().__getitem__(i)
