"""Per-sample input pipelines for the worker benchmarks, the same for theano_queue and PyTorch.

numpy only: bench/run.py (theano_queue's Feeder with workers) and
bench/torch_workers_peer.py (PyTorch's DataLoader) both import it, and worker
processes of both import it again.

Augment   CPU-heavy: "decode" a 3x72x72 uint8 image (drawn from the index),
          random crop to 64x64, random horizontal flip, to float32, normalise
          per channel, 3x3 box blur.  About 0.1-0.15 ms of numpy per sample.
          Gives (image float32 (3, 64, 64), label int64).
Frames    Large samples, cheap decode: 3x224x224 uint8 frames taken from a small
          pool of decoded frames (cache-resident), flipped for odd indices.
          Gives (frame uint8 (3, 224, 224), label int64).

Both define read_into(i, row) too: the last operation of the decode writes into
the row it is given.  theano_queue's Feeder uses it when asked (the zero-copy
path); PyTorch's DataLoader only knows __getitem__.
"""

import numpy as np

MEAN = (np.array([0.485, 0.456, 0.406], np.float32) * 255)[:, None, None]
INV_STD = (1 / (np.array([0.229, 0.224, 0.225], np.float32) * 255))[:, None, None]
NINTH = np.float32(1 / 9)


class Augment:
    shape = (3, 64, 64)
    dtype = "float32"

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def _blurred_sum(self, i):
        rng = np.random.default_rng(i)
        img = rng.integers(0, 256, (3, 72, 72), dtype=np.uint8)
        r, c = rng.integers(0, 9, 2)
        crop = img[:, r : r + 64, c : c + 64]
        if rng.random() < 0.5:
            crop = crop[:, :, ::-1]
        x = (crop.astype(np.float32) - MEAN) * INV_STD
        p = np.pad(x, ((0, 0), (1, 1), (1, 1)), mode="edge")
        return (
            p[:, :-2, :-2]
            + p[:, :-2, 1:-1]
            + p[:, :-2, 2:]
            + p[:, 1:-1, :-2]
            + p[:, 1:-1, 1:-1]
            + p[:, 1:-1, 2:]
            + p[:, 2:, :-2]
            + p[:, 2:, 1:-1]
            + p[:, 2:, 2:]
        ), i % 1000

    def __getitem__(self, i):
        acc, label = self._blurred_sum(i)
        return np.multiply(acc, NINTH), np.int64(label)

    def read_into(self, i, row):
        acc, label = self._blurred_sum(i)
        np.multiply(acc, NINTH, out=row[0])
        row[1][...] = label


class AugmentCopying(Augment):
    """Augment without read_into: the Feeder copies what __getitem__ returns into the slot."""

    read_into = None


class Frames:
    shape = (3, 224, 224)
    dtype = "uint8"

    def __init__(self, n, pool=6):
        self.n, self.pool_size = n, pool
        self._pool = None

    def __getstate__(self):
        return {"n": self.n, "pool_size": self.pool_size, "_pool": None}  # each process decodes its own pool

    def __len__(self):
        return self.n

    def pool(self):
        if self._pool is None:
            rng = np.random.default_rng(0)
            self._pool = [rng.integers(0, 256, self.shape, dtype=np.uint8) for _ in range(self.pool_size)]
        return self._pool

    def _frame(self, i):
        frame = self.pool()[i % self.pool_size]
        return frame[:, :, ::-1] if i & 1 else frame

    def __getitem__(self, i):
        return np.array(self._frame(i)), np.int64(i % 1000)

    def read_into(self, i, row):
        np.copyto(row[0], self._frame(i))
        row[1][...] = i % 1000


class FramesCopying(Frames):
    read_into = None


PIPELINES = {"augment": (Augment, AugmentCopying), "frames": (Frames, FramesCopying)}
