"""What the variable-length tests share (tests/cpu/test_varlen.py, tests/cpu/test_varlen_feeding.py): a mixed spec,
ragged elements, and what the queue gives back for them."""

import numpy as np

import theano_queue as tq

SPEC = [("image", "uint8", (8, 3)), ("tokens", "int32", (8, tq.upto(16))), ("label", "int64", (8,))]
PAD = -7


def ragged_batch(rng, rows=8, bound=16):
    """A mixed element: fixed image and label, rows of tokens of their own lengths (0 and the bound among them)."""
    lengths = rng.integers(0, bound + 1, rows)
    lengths[: min(rows, 2)] = [0, bound][: min(rows, 2)]
    rng.shuffle(lengths)
    tokens = [rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int64).astype("int32") for n in lengths]
    return rng.integers(0, 256, (rows, 3), dtype=np.uint8), tokens, rng.integers(0, 2**40, rows)


def padded(rows, pad=PAD, dtype="int32"):
    """What the queue gives back: the rows padded to the longest with pad, and their lengths."""
    longest = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), longest), pad, dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, np.array([len(r) for r in rows], np.int64)


def check_element(got, image, rows, label):
    g_image, g_tokens, g_label, g_lengths = got
    want_tokens, want_lengths = padded(rows)
    assert np.array_equal(g_image, image) and np.array_equal(g_label, label)
    assert g_tokens.dtype == np.int32 and g_tokens.shape == want_tokens.shape
    assert np.array_equal(g_tokens, want_tokens)
    assert g_lengths.dtype == np.int64 and np.array_equal(g_lengths, want_lengths)
