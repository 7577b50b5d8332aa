"""The edges of one element (issue 40, point 1 and the smaller findings): integers that do not fit are refused
whatever their width or sign, an element's components agree on their leading (batch) axis unless one is declared
with an axis of its own (tq.own), and the messages say the real fix.  Every kind of producer is run by the feed
contract (tests/support/feed_contract.py); here are the entries it does not reach and the messages."""

import numpy as np
import pytest

import theano_queue as tq

ROWS = 4


def queue(dtype="int64", capacity=4, **kwargs):
    return tq.Queue([("x", "float32", (ROWS, 3)), ("y", dtype, (ROWS,))], capacity=capacity, target="cpu", **kwargs)


def x_rows(n=ROWS):
    return np.zeros((n, 3), "float32")


# ---- integers that do not fit --------------------------------------------------------------------------------

# (dtype, a value that does not fit it, numpy's dtype of that value)
NOT_FITTING = [
    ("int64", 2**63, "uint64"),
    ("uint64", -1, "int64"),
    ("int64", -(2**63) - 1, "int"),
    ("uint64", 2**64, "int"),
    ("uint32", -1, "int64"),
    ("int32", 2**31, "int64"),
]
FITTING = [("int64", 2**63 - 1), ("int64", -(2**63)), ("uint64", 2**64 - 1), ("uint64", 0), ("uint32", 2**32 - 1)]


def fit_message(q, dtype, given):
    return (
        "Queue '%s', component 'y': expected values that fit dtype %s; these %s values do not (a cast would "
        % (
            q.name,
            dtype,
            given,
        )
        + "change them)"
    )


@pytest.mark.parametrize("dtype, value, given", NOT_FITTING)
def test_a_python_int_that_does_not_fit_is_refused_by_put(dtype, value, given):
    q = queue(dtype)
    for y in ([value] * ROWS, [value, 0, 1, 2]):
        with pytest.raises(TypeError) as err:
            q.put(x_rows(), y)
        # The dtype numpy reads them as; where no numpy integer holds them all (a uint64's value beside an
        # int64's: numpy says float64), they are judged, and named, as the Python ints they are.
        read = np.asarray(y).dtype
        assert str(err.value) == fit_message(q, dtype, read.name if read.kind in "iu" else "int")
        assert read.kind not in "iu" or read.name == given
    with pytest.raises(TypeError) as err:
        q.put(x_rows(), [value, -1, 2**63, 0])  # numpy reads these as float64: they are judged as the ints they are
    assert str(err.value) == fit_message(q, dtype, "int")
    assert q.size() == 0
    q.put(x_rows(), [1, 2, 3, 4])
    assert q.get()[1].tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("dtype, value", FITTING)
def test_a_python_int_at_the_edge_of_its_dtype_is_taken_exactly(dtype, value):
    q = queue(dtype)
    q.put(x_rows(), [value, 0, value, 0])
    got = q.get()[1]
    assert got.dtype == np.dtype(dtype) and [int(v) for v in got] == [value, 0, value, 0]


@pytest.mark.parametrize("dtype, value, given", NOT_FITTING[:4])
def test_a_python_int_that_does_not_fit_is_refused_by_a_map_style_dataset(dtype, value, given):
    class Samples:
        def __len__(self):
            return ROWS

        def __getitem__(self, i):
            return np.zeros(3, "float32"), value

    q = queue(dtype, capacity=2)
    with tq.Feeder(q, Samples()):
        with pytest.raises(tq.FeederError) as err:
            q.get(timeout=30)
    assert fit_message(q, dtype, given) in str(err.value)


@pytest.mark.parametrize("dtype, value, given", NOT_FITTING[:4])
def test_a_pad_value_that_does_not_fit_is_refused(dtype, value, given):
    with pytest.raises(TypeError) as err:
        tq.Queue([("tokens", dtype, (ROWS, tq.upto(5)))], target="cpu", name="pads", pad_value=value)
    assert "expected values that fit dtype %s; these %s values do not" % (dtype, given) in str(err.value)


@pytest.mark.parametrize("dtype, value, given", NOT_FITTING[:4])
def test_a_variable_length_row_that_does_not_fit_is_refused(dtype, value, given):
    q = tq.Queue([("tokens", dtype, (ROWS, tq.upto(5))), ("y", "int32", (ROWS,))], target="cpu", name="rows")
    with pytest.raises(TypeError) as err:
        q.put([[1, 2], [value], [3]], [0, 1, 2])
    assert str(err.value).startswith("Queue 'rows', component 'tokens': expected values that fit dtype %s" % dtype)
    assert q.size() == 0


def test_python_ints_that_fit_an_unsigned_component_keep_their_values():
    q = queue("uint64")
    q.put(x_rows(), [2**63, 2**64 - 1, 5, 0])
    assert [int(v) for v in q.get()[1]] == [2**63, 2**64 - 1, 5, 0]


def test_an_int_into_a_float_component_must_keep_its_value():
    q = tq.Queue([("w", "float32", (2,))], target="cpu", name="floats")
    q.put([2**24, 3])
    with pytest.raises(TypeError, match="expected values that fit dtype float32; these int64 values do not"):
        q.put([2**24 + 1, 3])
    with pytest.raises(TypeError, match="expected values that fit dtype float32; these int values do not"):
        q.put([2**64 - 1, 3])  # numpy would read these two as float64, losing the first's value
    assert q.get()[0].tolist() == [2**24, 3]


# ---- rows that differ ----------------------------------------------------------------------------------------


def rows_message(q, a, n, b, m, who=""):
    return (
        "%sQueue '%s': component '%s' has %d rows and component '%s' %d; the components of an element share "
        "their leading (batch) axis (declare a leading axis of a component's own as tq.own(n))"
        % (who, q.name, a, n, b, m)
    )


@pytest.mark.parametrize("y", [np.arange(3, dtype="int32"), [0, 1, 2]])
def test_put_refuses_components_of_different_row_counts(y):
    q = queue("int32")
    with pytest.raises(ValueError) as err:
        q.put(x_rows(), y)
    assert str(err.value) == rows_message(q, "x", 4, "y", 3)
    with pytest.raises(ValueError) as err:
        q.put({"y": np.arange(4, dtype="int32"), "x": x_rows(2)})
    assert str(err.value) == rows_message(q, "x", 2, "y", 4)
    assert q.size() == 0
    q.put(x_rows(2), np.arange(2, dtype="int32"))  # a short batch, both short alike
    assert q.get()[1].tolist() == [0, 1]


def test_a_generator_feeder_refuses_components_of_different_row_counts():
    q = queue("int32", capacity=2)

    def batches():
        yield x_rows(), np.arange(4, dtype="int32")
        yield x_rows(), np.arange(3, dtype="int32")

    with tq.Feeder(q, batches()):
        assert len(q.get(timeout=30)[0]) == ROWS
        with pytest.raises(tq.FeederError) as err:
            q.get(timeout=30)
    assert rows_message(q, "x", 4, "y", 3) in str(err.value)


def test_the_engine_refuses_rows_that_differ_whatever_put_them():
    q = queue("int32")
    with pytest.raises(ValueError) as err:
        q._ring.put([x_rows(), np.arange(3, dtype="int32")])
    assert str(err.value) == rows_message(q, "x", 4, "y", 3)
    slot, views = q._ring.reserve()
    with pytest.raises(ValueError) as err:
        q._ring.commit(slot, [4, 3])
    assert "component 'x' has 4 rows and component 'y' 3" in str(err.value)
    assert q.size() == 0


def test_a_writers_rows_are_one_number_of_rows():
    q = queue("int32")
    for rows in ((4, 3), [4, 3], 2.5, True):
        with pytest.raises(TypeError) as err:
            with q.writer() as slot:
                slot.rows = rows
        assert str(err.value) == (
            "Queue.writer: queue '%s': slot.rows is the number of rows written along the batch axis, one int for "
            "every component, got %r" % (q.name, rows)
        )
    for rows in (5, -1):
        with pytest.raises(ValueError, match="rows \\[%d, %d\\] do not fit the components" % (rows, rows)):
            with q.writer() as slot:
                slot.rows = rows
    assert q.size() == 0
    with q.writer() as slot:
        slot["y"][:2] = [7, 8]
        slot.rows = np.int64(2)
    assert q.get()[1].tolist() == [7, 8]


def test_variable_length_rows_must_agree_with_the_other_components():
    q = tq.Queue([("tokens", "int32", (ROWS, tq.upto(5))), ("y", "int32", (ROWS,))], target="cpu", name="vrows")
    with pytest.raises(ValueError) as err:
        q.put([[1, 2], [3], [4, 5, 6], [7]], [0, 1, 2])
    assert str(err.value) == rows_message(q, "tokens", 4, "y", 3)
    with pytest.raises(ValueError) as err:
        q.put(tq.Padded(np.zeros((2, 5), "int32"), [1, 2]), [0, 1, 2])
    assert str(err.value) == rows_message(q, "tokens", 2, "y", 3)
    assert q.size() == 0


def test_an_array_dataset_of_arrays_of_different_lengths_is_refused_in_the_one_wording():
    q = queue("int32", capacity=2)
    with pytest.raises(ValueError) as err:
        tq.Feeder(q, (np.zeros((8, 3), "float32"), np.zeros(7, "int32")))
    assert str(err.value) == rows_message(q, "x", 8, "y", 7)


def test_a_theano_enqueue_refuses_rows_that_differ_naming_the_op():
    import theano
    import theano.tensor as T

    q = queue("int32")
    x, y = T.matrix("x", dtype="float32"), T.vector("y", dtype="int32")
    put = theano.function([x, y], q.enqueue(x, y))
    with pytest.raises(ValueError) as err:
        put(x_rows(), np.arange(3, dtype="int32"))
    assert str(err.value).split("\nApply node")[0] == rows_message(q, "x", 4, "y", 3, "Enqueue: ")
    put(x_rows(), np.arange(4, dtype="int32"))
    assert q.size() == 1


def test_a_theano_enqueues_perform_refuses_rows_that_differ_naming_the_op():
    import theano
    import theano.tensor as T

    q = queue("int32")
    x, y = T.matrix("x", dtype="float32"), T.vector("y", dtype="int32")
    put = theano.function([x, y], q.enqueue(x, y), mode=theano.Mode(linker="py"))
    with pytest.raises(ValueError) as err:
        put(x_rows(), np.arange(3, dtype="int32"))
    assert str(err.value).split("\nApply node")[0] == rows_message(q, "x", 4, "y", 3, "Enqueue: ")


# ---- components with a leading axis of their own -------------------------------------------------------------


def own_queue():
    return tq.Queue(
        [("x", "float32", (ROWS, 3)), ("classes", "int32", (tq.own(10),)), ("w", "float32", ())],
        target="cpu",
        name="own",
        capacity=4,
    )


def test_a_component_declared_with_an_axis_of_its_own_may_differ_from_the_batch():
    q = own_queue()
    assert repr(q.components[1].shape[0]) == "own(10)" and q.components[1].shape == (10,)
    assert [c.batched for c in q.components] == [True, False, False]
    q.put(x_rows(2), np.arange(7, dtype="int32"), np.float32(1))
    x, classes, w = q.get()
    assert (len(x), len(classes), float(w)) == (2, 7, 1.0)
    with pytest.raises(ValueError, match="expected shape \\(<=10,\\), got \\(11,\\)"):
        q.put(x_rows(), np.arange(11, dtype="int32"), np.float32(1))


def test_an_axis_of_its_own_is_only_a_leading_axis():
    with pytest.raises(ValueError, match="tq.own marks a leading axis"):
        tq.Queue([("x", "float32", (4, tq.own(3)))], target="cpu")
    with pytest.raises(ValueError, match="own: expected a bound that is an int >= 1"):
        tq.own(0)


def test_a_writer_writes_an_axis_of_its_own_whole():
    q = own_queue()
    with q.writer() as slot:
        slot["classes"][:] = np.arange(10)
        slot.rows = 1
    x, classes, w = q.get()
    assert (len(x), len(classes)) == (1, 10)


def test_an_array_dataset_needs_a_batch_axis_on_every_component():
    q = own_queue()
    with pytest.raises(ValueError, match="component 'classes' has no batch axis"):
        tq.Feeder(q, (np.zeros((8, 3), "float32"), np.zeros((8,), "int32"), np.zeros(8, "float32")))


def test_own_survives_pickling():
    import pickle

    assert repr(pickle.loads(pickle.dumps(tq.own(5)))) == "own(5)"
