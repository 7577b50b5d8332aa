"""Messages at the edges that say the real fix (issue 40, the smaller findings): NaN labels, a __len__ that is no
int, a tuple holding a numpy scalar, a generator resumed past its end; and float16 casts gathered natively."""

import numpy as np
import pytest

import theano_queue as tq

ROWS = 4


def queue(capacity=2, **kwargs):
    return tq.Queue([("x", "float32", (ROWS, 3)), ("y", "int32", (ROWS,))], capacity=capacity, target="cpu", **kwargs)


def nan_labels(n=ROWS):
    y = np.arange(n, dtype="float64")
    y[1] = np.nan
    return y


NAN = "expected dtype int32, got float64 values with NaN, and NaN cannot be an integer: fill or drop the missing "
NAN += "values first, or declare the component float64"


@pytest.mark.parametrize("y", [nan_labels(), nan_labels().tolist(), np.float64(np.nan)])
def test_nan_labels_are_refused_as_nan_not_advised_to_be_cast(y):
    q = queue()
    with pytest.raises(TypeError) as err:
        q.put(np.zeros((ROWS, 3), "float32"), y if np.ndim(y) else [y] * ROWS)
    assert str(err.value) == "Queue '%s', component 'y': %s" % (q.name, NAN)
    assert "astype" not in str(err.value)


def test_nan_labels_of_an_array_dataset_are_refused_when_the_feeder_is_made():
    q = queue()
    with pytest.raises(TypeError) as err:
        tq.Feeder(q, (np.zeros((8, 3), "float32"), nan_labels(8)))
    assert str(err.value) == "Queue '%s', component 'y': %s" % (q.name, NAN)


def test_float_labels_without_nan_keep_the_advice_to_cast():
    q = queue()
    with pytest.raises(TypeError, match=r"got float64, which does not cast safely to it: pass \.astype\('int32'\)"):
        q.put(np.zeros((ROWS, 3), "float32"), np.arange(ROWS, dtype="float64"))


class Sized:
    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return np.zeros(3, "float32"), i


@pytest.mark.parametrize("length", [3.5, -1, "3", None])
def test_a_len_that_is_no_count_of_samples_names_the_datasets_len(length):
    q = queue()
    with pytest.raises(TypeError) as err:
        tq.Feeder(q, Sized(length))
    assert str(err.value) == (
        "Feeder(%s): len(dataset) gave %r: Sized.__len__ must return the number of samples, an int >= 0"
        % (q.name, length)
    )
    assert not q.feeders


def test_a_tuple_holding_a_numpy_scalar_is_refused_when_the_feeder_is_made():
    q = tq.Queue([("ids", "int32", (ROWS,)), ("w", "float32", (ROWS,))], target="cpu", capacity=2)
    with pytest.raises(ValueError) as err:
        tq.Feeder(q, (np.arange(8, dtype="int32"), np.float32(3)))
    assert str(err.value) == (
        "Queue '%s', component 'w': an array dataset holds rows of every component; got a numpy float32 scalar: "
        "give an array with one value per row, e.g. np.full(8, value)" % q.name
    )
    assert not q.feeders


def test_a_generator_resumed_past_its_end_says_so():
    q = queue()

    def batches(n):
        for i in range(n):
            yield np.full((ROWS, 3), i, "float32"), np.arange(ROWS, dtype="int32")

    with tq.Feeder(q, batches(3), state={"version": 1, "kind": "iterable", "consumed": [5]}):
        with pytest.raises(tq.FeederError) as err:
            q.get(timeout=30)
    assert (
        "the state's consumed lies past this run's end: it was saved from another dataset or more epochs, and "
        "resuming would give an empty run:\n  stream 0: consumed=5, but this run gives it 3 element(s): at most 3"
    ) in str(err.value)


def test_a_generator_resumed_within_its_end_goes_on():
    q = queue()

    def batches(n):
        for i in range(n):
            yield np.full((ROWS, 3), i, "float32"), np.arange(ROWS, dtype="int32")

    with tq.Feeder(q, batches(3), state={"version": 1, "kind": "iterable", "consumed": [2]}):
        assert q.get(timeout=30)[0][0, 0] == 2
        with pytest.raises(tq.QueueClosed):
            q.get(timeout=30)


@pytest.mark.parametrize("source", ["uint8", "int8", "bool"])
def test_casts_into_float16_are_gathered_by_the_engine(source):
    q = tq.Queue([("x", "float16", (ROWS, 3)), ("y", "int32", (ROWS,))], capacity=2, target="cpu")
    x = (np.arange(24).reshape(8, 3) % (2 if source == "bool" else 100)).astype(source)
    with tq.Feeder(q, (x, np.arange(8, dtype="int32"))) as f:
        got = [q.get(timeout=30) for _ in range(2)]
        assert f.stats()["gather"]["x"] == "host"
    assert np.array_equal(np.concatenate([g[0] for g in got]), x.astype("float16"))
