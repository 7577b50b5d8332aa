"""Variable-length (upto) components through PyTensor graphs: padding, lengths and masks on both linkers."""

import numpy as np
import pytensor
import pytensor.tensor as pt

import theano_queue.pytensor as tq

ROWS = [np.arange(n, dtype="int32") + 1 for n in (3, 1, 5)]


def make_queue():
    return tq.Queue([("tokens", "int32", (4, tq.upto(6))), ("label", "int64", (4,))], capacity=2, pad_value=-1)


def test_dequeue_gives_padded_rows_their_lengths_and_a_mask(mode):
    q = make_queue()
    tokens, label, lengths = q.dequeue(lengths=True)
    mask = pt.arange(tokens.shape[1]) < lengths[:, None]
    f = pytensor.function([], [tokens, lengths, (tokens * mask).sum(1), label], mode=mode)
    q.put(ROWS, np.arange(3))
    got_tokens, got_lengths, sums, labels = f()
    assert got_tokens.shape == (3, 5)  # padded to this element's longest row, not the bound
    assert got_lengths.tolist() == [3, 1, 5] and labels.tolist() == [0, 1, 2]
    assert got_tokens[1].tolist() == [1, -1, -1, -1, -1]
    assert sums.tolist() == [int(r.sum()) for r in ROWS]


def test_enqueue_takes_a_padded_variable_and_its_lengths(mode):
    q = make_queue()
    padded, lengths = pt.imatrix("padded"), pt.lvector("lengths")
    f = pytensor.function(
        [padded, lengths], q.enqueue(padded, pt.arange(padded.shape[0]), lengths={"tokens": lengths}), mode=mode
    )
    data = np.full((2, 4), 7, "int32")
    assert int(f(data, np.array([2, 4]))) == 1
    tokens, label, got_lengths = q.get(lengths=True)
    assert tokens.tolist() == [[7, 7, -1, -1], [7, 7, 7, 7]] and got_lengths.tolist() == [2, 4]


def test_enqueue_refuses_rows_longer_than_the_bound(mode):
    q = make_queue()
    padded = pt.imatrix("padded")
    f = pytensor.function([padded], q.enqueue(padded, pt.arange(padded.shape[0])), mode=mode)
    try:
        f(np.zeros((2, 7), "int32"))
    except Exception as exc:  # PyTensor's Assert raises AssertionError
        assert "bound" in str(exc)
    else:
        raise AssertionError("a row of 7 went into upto(6)")
    assert q.size() == 0
    f(np.zeros((2, 6), "int32"))
    assert q.size() == 1
