"""Messages that name their fix (issue 29's newcomer findings): each says what to do, not only what went wrong."""

import numpy as np
import pytest

import theano_queue as tq


@pytest.mark.parametrize("dtype", ["float", float, "int", int])
def test_a_dtype_numpy_would_widen_silently_is_refused_naming_both_widths(dtype):
    with pytest.raises(TypeError, match=r"component 'x': dtype .* is ambiguous .*(float32 or float64|int32 or int64)"):
        tq.Queue([("x", dtype, (4,))], target="cpu")


def test_int64_labels_are_refused_with_both_fixes():
    q = tq.Queue([("x", "float32", (4, 2)), ("y", "int32", (4,))], target="cpu", name="train")
    fixes = r"got int64, which does not cast safely to it: pass .astype\('int32'\), or declare the component int64"
    with pytest.raises(TypeError, match=fixes):
        q.put(np.zeros((4, 2), "float32"), np.zeros(4, "int64"))
    with pytest.raises(TypeError, match=fixes):  # an array dataset, checked by the Feeder
        tq.Feeder(q, (np.zeros((8, 2), "float32"), np.zeros(8, "int64")))
    assert q.size() == 0


def test_int64_labels_from_an_iterable_say_so_once_at_the_consumer():
    q = tq.Queue([("x", "float32", (4, 2)), ("y", "int32", (4,))], target="cpu", name="train")
    with tq.Feeder(q, [(np.zeros((4, 2), "float32"), np.zeros(4, "int64"))]):
        with pytest.raises(tq.FeederError) as caught:
            q.get()
    assert str(caught.value).count("does not cast safely") == 1
    assert "declare the component int64" in str(caught.value.__cause__)


def test_a_list_of_samples_given_as_batches_says_that_a_list_means_batches():
    q = tq.Queue([("x", "float32", (4, 2)), ("y", "int32", (4,))], target="cpu")
    samples = [(np.zeros(2, "float32"), np.int32(1)) for _ in range(4)]
    with tq.Feeder(q, samples):
        with pytest.raises(tq.FeederError) as caught:
            q.get()
    assert "looks like one sample: an iterable, a list too, gives whole batches" in str(caught.value.__cause__)
