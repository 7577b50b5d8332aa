"""Variable-length axes (tq.upto): declaring, what crosses put and get, what the graph sees, bad input.

The Feeder, bucketing and the GPU Ops with variable-length components: tests/cpu/test_varlen_feeding.py.
"""

import numpy as np
import pytest
from ragged import PAD, SPEC, check_element, padded, ragged_batch

import theano_queue as tq


def queue(spec=SPEC, **kwargs):
    kwargs.setdefault("target", "cpu")
    kwargs.setdefault("pad_value", {"tokens": PAD})
    return tq.Queue(spec, capacity=kwargs.pop("capacity", 4), **kwargs)


# ---- declaring ---------------------------------------------------------------------------


def test_the_queue_keeps_the_users_components_and_sizes_the_slot_for_the_bound():
    q = queue()
    tokens = q.components[1]
    assert tokens.shape == (8, tq.upto(16)) and tokens.variable_axes == (1,) and tokens.pad_value == PAD
    assert repr(tokens.shape) == "(8, upto(16))" and tokens.nbytes == 8 * 16 * 4
    assert tokens.broadcastable == (False, False)
    assert "tokens:int32(8, upto(16))" in repr(q)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(spec=[("x", "int32", (tq.upto(8), 4))]), ValueError, "component 'x': the leading .* axis"),
        (dict(spec=[("x", "int32", (8, 4))], pad_value={"x": 1}), ValueError, "component 'x': pad_value is for"),
        (dict(pad_value={"nope": 1}), ValueError, "pad_value names 'nope', which is no component"),
        (dict(pad_value={"tokens": 1.5}), TypeError, "pad_value 1.5: .*component 'tokens'"),
        (dict(pad_value={"tokens": [1, 2]}), ValueError, "component 'tokens': pad_value must be one number"),
        (dict(pad_value="x"), TypeError, "pad_value must be one number, or map component names"),
    ],
)
def test_bad_declarations_name_the_component(kwargs, error, message):
    with pytest.raises(error, match=message):
        queue(**kwargs)


def test_one_pad_value_serves_every_variable_component():
    spec = [("a", "int32", (2, tq.upto(4))), ("b", "float32", (2, tq.upto(3), 2)), ("y", "int64", (2,))]
    q = tq.Queue(spec, target="cpu", pad_value=-1)
    q.put(
        [np.arange(1, dtype="int32"), np.arange(3, dtype="int32")],
        [np.ones((1, 2), "float32"), np.ones((2, 2), "float32")],
        np.arange(2),
    )
    a, b, _ = q.get()
    assert a.tolist() == [[0, -1, -1], [0, 1, 2]] and b[0, 1:].tolist() == [[-1, -1]] and b[1].tolist() == [[1, 1]] * 2
    with pytest.raises(ValueError, match="pad_value is for components with a variable"):
        tq.Queue([("y", "int64", (2,))], target="cpu", pad_value=0)
    with pytest.raises(TypeError, match="pad_value must be one number"):
        tq.Queue(spec, target="cpu", pad_value=[1, 2])


def test_upto_takes_a_non_negative_int_bound():
    for bad in (-1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="upto: expected a bound"):
            tq.upto(bad)


# ---- put and get: bit-exact, only the used bytes ------------------------------------------------


def test_every_put_form_gives_back_bit_exact_data_and_lengths():
    rng = np.random.default_rng(0)
    q = queue(capacity=8)
    for i in range(60):
        image, rows, label = ragged_batch(rng, rows=int(rng.integers(1, 9)))
        form = i % 4
        if form == 0:  # a list of rows
            q.put(image, rows, label)
        elif form == 1:  # a padded array and its lengths; the padding is not read
            data, lengths = padded(rows, pad=12345)
            wider = np.concatenate([data, np.full((len(data), 3), 99, np.int32)], axis=1)
            q.put({"image": image, "tokens": wider, "label": label}, lengths={"tokens": lengths})
        elif form == 2:  # tq.Padded
            q.put(image, tq.Padded(*padded(rows, pad=5)), label)
        else:  # an array: every row full
            longest = max(len(r) for r in rows)
            rows = [rng.integers(0, 9, longest).astype("int32") for _ in rows]
            q.put(image, np.stack(rows), label)
        check_element(q.get(lengths=True), image, rows, label)


def test_only_the_elements_own_extent_crosses():
    q = queue()
    before = q.stats()["bytes_in"]
    rows = [np.arange(3, dtype="int32"), np.arange(5, dtype="int32")]
    q.put(np.zeros((2, 3), np.uint8), rows, np.zeros(2, np.int64))
    # 2 x 3 image bytes, 2 rows x 5 (the longest) int32 tokens, 2 int64 lengths, 2 int64 labels; no extent bytes.
    assert q.stats()["bytes_in"] - before == 6 + 2 * 5 * 4 + 2 * 8 + 2 * 8
    tokens = q.get()[1]
    assert tokens.shape == (2, 5)


def test_rows_of_length_zero_and_exactly_the_bound():
    q = queue()
    q.put(np.zeros((3, 3), np.uint8), [[], [], []], np.arange(3))
    image, tokens, label, lengths = q.get(lengths=True)
    assert tokens.shape == (3, 0) and np.array_equal(lengths, [0, 0, 0])
    full = [np.arange(16, dtype="int32")] * 8
    q.put(np.zeros((8, 3), np.uint8), full, np.arange(8))
    image, tokens, label, lengths = q.get(lengths=True)
    assert np.array_equal(tokens, np.stack(full)) and np.array_equal(lengths, [16] * 8)
    q.put(np.zeros((0, 3), np.uint8), [], np.zeros(0, np.int64))  # no rows at all
    assert [a.shape for a in q.get(lengths=True)] == [(0, 3), (0, 0), (0,), (0,)]


def test_two_variable_axes_and_a_fixed_inner_block():
    q = tq.Queue([("grid", "float32", (4, tq.upto(5), 2, tq.upto(6), 3))], target="cpu", pad_value={"grid": -1})
    rng = np.random.default_rng(1)
    shapes = [(2, 2, 6, 3), (5, 2, 1, 3), (0, 2, 4, 3)]
    rows = [rng.standard_normal(s).astype("float32") for s in shapes]
    q.put(rows)  # a queue of one component: the list of rows is the element
    grid, lengths = q.get(lengths=True)
    assert grid.shape == (3, 5, 2, 6, 3)
    assert np.array_equal(lengths, [[2, 6], [5, 1], [0, 4]])
    for row, got in zip(rows, grid):
        a, _, b, _ = row.shape
        assert np.array_equal(got[:a, :, :b], row)
        assert (got[a:] == -1).all() and (got[:, :, b:] == -1).all()


def test_writer_packs_the_rows_written_at_the_bound():
    q = queue()
    with q.writer() as slot:
        assert slot["tokens"].shape == (8, 16)
        slot["image"][:2] = 1
        slot["tokens"][0, :3] = [1, 2, 3]
        slot["tokens"][1, :1] = [4]
        slot.lengths["tokens"][:2] = [3, 1]
        slot["label"][:2] = [10, 11]
        slot.rows = 2
    image, tokens, label, lengths = q.get(lengths=True)
    assert np.array_equal(tokens, [[1, 2, 3], [4, PAD, PAD]]) and np.array_equal(lengths, [3, 1])
    with q.writer() as slot:  # lengths start full
        slot["tokens"][:] = 7
    assert q.get()[1].shape == (8, 16)


class Grids:
    """Map-style: sample i is (3, (i * 7) % (bound + 1)) int32, the variable axis after a fixed one."""

    def __init__(self, bound):
        self.bound = bound

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return (np.full((3, (i * 7) % (self.bound + 1)), i, np.int32),)


@pytest.mark.parametrize("bound", [5, 4096])  # short sub-rows, and sub-rows of 8 KiB and more
def test_a_variable_axis_after_a_fixed_one_is_cut_in_every_sub_row(bound):
    q = tq.Queue([("g", "int32", (2, 3, tq.upto(bound)))], capacity=4, target="cpu", pad_value=-1)

    def want(rows):
        out = np.full((len(rows), 3, max(r.shape[1] for r in rows)), -1, np.int32)
        for i, r in enumerate(rows):
            out[i, :, : r.shape[1]] = r
        return out

    rng = np.random.default_rng(bound)
    rows = [rng.integers(0, 100, (3, n)).astype("int32") for n in (bound - 2, bound)]
    padded = np.full((2, 3, bound), 77, np.int32)
    for i, r in enumerate(rows):
        padded[i, :, : r.shape[1]] = r
    q.put(padded, lengths={"g": [bound - 2, bound]})
    q.put(padded.astype(np.int16) if bound < 100 else padded, lengths={"g": [bound - 2, bound]})  # a safe cast too
    q.put(rows)
    with q.writer() as slot:
        for i, r in enumerate(rows):
            slot["g"][i, :, : r.shape[1]] = r
            slot.lengths["g"][i] = r.shape[1]
    for _ in range(4):
        got, lengths = q.get(lengths=True)
        assert np.array_equal(got, want(rows)) and lengths.tolist() == [bound - 2, bound]
    with tq.Feeder(q, Grids(bound)):  # batches of the queue's 2 rows
        for b in range(6):
            got, lengths = q.get(lengths=True)
            assert np.array_equal(got, want([Grids(bound)[2 * b][0], Grids(bound)[2 * b + 1][0]]))


class WideRows:
    """Map-style: sample i holds (i * 5) % 33 steps of 128 float32 features (8 KiB rows from 16 steps)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return (np.random.default_rng(i).standard_normal(((i * 5) % 33, 128)).astype("float32"),)


def test_wide_rows_are_packed_row_by_row_bit_exact_by_put_and_by_the_feeder():
    spec = [("seq", "float32", (4, tq.upto(32), 128))]
    q = tq.Queue(spec, capacity=3, target="cpu", pad_value={"seq": np.nan})
    samples = [WideRows()[i][0] for i in range(40)]
    assert samples[0].shape == (0, 128) and max(len(s) for s in samples) == 32
    with tq.Feeder(q, WideRows()):
        for b in range(10):
            rows = samples[4 * b : 4 * b + 4]
            seq, lengths = q.get(lengths=True)
            assert np.array_equal(lengths, [len(r) for r in rows])
            for got, row in zip(seq, rows):
                assert np.array_equal(got[: len(row)], row) and np.isnan(got[len(row) :]).all()
    q.reopen()
    for rows in (samples[:4], samples[5:9]):
        data = np.full((4, 32, 128), 7, np.float32)
        for i, r in enumerate(rows):
            data[i, : len(r)] = r
        q.put(tq.Padded(data, [len(r) for r in rows]))
        q.put(rows)
        for _ in range(2):
            (seq,) = q.get()
            assert seq.shape == (4, max(len(r) for r in rows), 128)
            for got, row in zip(seq, rows):
                assert np.array_equal(got[: len(row)], row) and np.isnan(got[len(row) :]).all()


@pytest.mark.parametrize("dtype, pad", [("float32", -1.5), ("int16", 7), ("uint8", 0), ("complex128", 1 - 2j)])
def test_a_large_padded_batch_packs_bit_exact_from_rows_at_any_stride(dtype, pad):
    # Several MiB: the packing is shared over the copy threads, whose chunks
    # must each pad their own rows; the source rows lie inside a wider array.
    rows, bound, inner = 64, 300, 40
    q = tq.Queue([("seq", dtype, (rows, tq.upto(bound), inner))], capacity=2, target="cpu", pad_value={"seq": pad})
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, bound + 1, rows)
    lengths[:2] = [0, bound]
    wide = (rng.standard_normal((rows, bound + 9, inner)) * 100).astype(dtype)
    source = wide[:, 3:, :]  # rows of (bound + 6, inner), contiguous within, 9 items apart
    q.put(tq.Padded(source, lengths))
    seq, got_lengths = q.get(lengths=True)
    assert seq.shape == (rows, bound, inner) and np.array_equal(got_lengths, lengths)
    for got, want, n in zip(seq, source, lengths):
        assert np.array_equal(got[:n], want[:n]) and (got[n:] == np.asarray(pad, dtype)).all()


# ---- bad input: refused, named, nothing enqueued ------------------------------------------------


@pytest.mark.parametrize(
    "tokens, lengths, error, message",
    [
        (
            [np.arange(17, dtype="int32")],
            None,
            ValueError,
            "component 'tokens': a row of length 17 .* bound upto\\(16\\)",
        ),
        (np.zeros((1, 17), np.int32), None, ValueError, "component 'tokens': rows of length 17 .* bound upto\\(16\\)"),
        (np.zeros((1, 4), np.int32), [5], ValueError, "component 'tokens': lengths say a row holds 5 .* only 4 long"),
        (np.zeros((1, 20), np.int32), [17], ValueError, "component 'tokens': a row of length 17 .* bound"),
        (np.zeros((1, 4), np.int32), [-1], ValueError, "component 'tokens': lengths must not be negative"),
        (np.zeros((1, 4), np.int32), [1, 2], ValueError, "component 'tokens': lengths must have shape \\(1,\\)"),
        (np.zeros((1, 4), np.int32), [1.0], TypeError, "component 'tokens': lengths must be integers"),
        (np.zeros((1, 4), np.float32), None, TypeError, "component 'tokens': expected dtype int32, got float32"),
        ([np.zeros(2, np.float64)], None, TypeError, "component 'tokens': expected dtype int32, got float64"),
        ([[1.5]], None, TypeError, "component 'tokens': expected values that fit dtype int32"),
        ([np.zeros((2, 2), np.int32)], None, ValueError, "component 'tokens': expected row 0 of 1 dimensions"),
        ([np.zeros(1, np.int32)] * 9, None, ValueError, "component 'tokens': expected at most 8 rows, got 9"),
    ],
)
def test_bad_input_is_refused_with_the_component_and_leaves_the_queue_intact(tokens, lengths, error, message):
    q = queue(name="bad")
    q.put(np.ones((1, 3), np.uint8), [np.arange(2, dtype="int32")], np.ones(1, np.int64))  # already queued
    n = 1 if not isinstance(tokens, list) else len(tokens)
    with pytest.raises(error, match="Queue 'bad', " + message):
        q.put(
            np.ones((min(n, 8), 3), np.uint8),
            tokens,
            np.ones(min(n, 8), np.int64),
            lengths=None if lengths is None else {"tokens": lengths},
        )
    assert q.size() == 1 and q.stats()["enqueued"] == 1
    check_element(q.get(lengths=True), np.ones((1, 3), np.uint8), [np.arange(2, dtype="int32")], np.ones(1))
    q.put(np.ones((1, 3), np.uint8), [np.arange(4, dtype="int32")], np.ones(1, np.int64))  # still usable
    assert q.get()[1].shape == (1, 4)


def test_a_writer_whose_lengths_pass_the_bound_puts_nothing():
    q = queue(name="w")
    with pytest.raises(ValueError, match="Queue 'w', component 'tokens': a row of length 17 .* bound upto\\(16\\)"):
        with q.writer() as slot:
            slot.lengths["tokens"][0] = 17
    assert q.size() == 0 and q.stats()["enqueued"] == 0
    with q.writer() as slot:
        slot.lengths["tokens"][:] = 1
    assert q.get()[1].shape == (8, 1)


def test_lengths_for_a_fixed_component_or_on_a_fixed_queue_are_refused():
    q = queue(name="q")
    with pytest.raises(ValueError, match="lengths given for 'image', which is no component with a variable axis"):
        q.put(np.ones((1, 3), np.uint8), [[1]], np.ones(1, np.int64), lengths={"image": [1]})
    fixed = tq.Queue([("x", "float32", (2,))], target="cpu", name="fixed")
    for call in (
        lambda: fixed.get(lengths=True),
        lambda: fixed.dequeue(lengths=True),
        lambda: fixed.put(np.ones(2, np.float32), lengths={"x": [1, 1]}),
    ):
        with pytest.raises(ValueError, match="Queue 'fixed': .*lengths=True.* needs a component with a variable"):
            call()
    assert q.size() == 0 and fixed.size() == 0


# ---- the graph ------------------------------------------------------------------------------


def test_dequeue_gives_the_batchs_own_extent_and_int64_lengths_for_a_mask():
    import theano
    import theano.tensor as T

    q = queue()
    image, tokens, label, lengths = q.dequeue(lengths=True)
    assert tokens.ndim == 2 and tokens.dtype == "int32" and lengths.dtype == "int64" and lengths.ndim == 1
    mask = T.lt(T.arange(tokens.shape[1]).dimshuffle("x", 0), lengths.dimshuffle(0, "x"))
    f = theano.function([], [image, tokens, label, lengths, (tokens * mask).sum(dtype="int64")])
    rng = np.random.default_rng(2)
    batches = [ragged_batch(rng, rows=int(rng.integers(1, 9))) for _ in range(30)]
    for image_b, rows, label_b in batches:
        q.put(image_b, rows, label_b)
        *got, masked_sum = f()
        check_element(got, image_b, rows, label_b)
        assert masked_sum == sum(int(r.astype(np.int64).sum()) for r in rows)


def test_a_function_with_only_the_padded_output_takes_one_element_per_call():
    import theano

    q = queue()
    tokens = q.dequeue()[1]
    f = theano.function([], tokens)
    for n in (3, 5):
        q.put(np.zeros((2, 3), np.uint8), [np.arange(n, dtype="int32")] * 2, np.zeros(2, np.int64))
    assert f().shape == (2, 3) and q.size() == 1
    assert f().shape == (2, 5) and q.size() == 0
    nodes = [type(n.op).__name__ for n in f.maker.fgraph.toposort()]
    assert nodes.count("Dequeue") == 1


def test_a_queue_of_one_variable_component_dequeues_a_bare_variable():
    import theano

    q = tq.Queue([("seq", "float32", (4, tq.upto(6), 2))], target="cpu")
    seq = q.dequeue()
    f = theano.function([], seq * 2)
    q.put([np.ones((3, 2), np.float32), np.ones((1, 2), np.float32)])
    out = f()
    assert out.shape == (2, 3, 2) and np.array_equal(out[1, 1:], np.zeros((2, 2)))


def test_graph_enqueue_with_lengths_pads_and_refuses_bad_lengths_keeping_the_queue():
    import theano
    import theano.tensor as T

    q = queue(name="g")
    image, tokens, label, lengths = T.matrix(dtype="uint8"), T.imatrix(), T.lvector(), T.lvector()
    put = theano.function([image, tokens, label, lengths], q.enqueue(image, tokens, label, lengths={"tokens": lengths}))
    put_full = theano.function([image, tokens, label], q.enqueue({"image": image, "tokens": tokens, "label": label}))
    data = np.arange(10, dtype="int32").reshape(2, 5)
    put(np.zeros((2, 3), np.uint8), data, np.arange(2), np.array([5, 2]))
    put_full(np.zeros((2, 3), np.uint8), data, np.arange(2))
    _, got, _, lens = q.get(lengths=True)
    assert np.array_equal(got, [[0, 1, 2, 3, 4], [5, 6, PAD, PAD, PAD]]) and np.array_equal(lens, [5, 2])
    _, got, _, lens = q.get(lengths=True)
    assert np.array_equal(got, data) and np.array_equal(lens, [5, 5])
    put_full(np.zeros((2, 3), np.uint8), data, np.arange(2))  # queued before the bad ones
    for bad_data, bad_lengths in (
        (data, [6, 1]),
        (data, [-1, 1]),
        (data, [1, 1, 1]),
        (np.zeros((2, 17), np.int32), [1, 1]),
    ):
        with pytest.raises(AssertionError, match="Queue 'g', component 'tokens': in the enqueued element"):
            put(np.zeros((2, 3), np.uint8), bad_data, np.arange(2), np.array(bad_lengths))
    assert q.size() == 1
    assert np.array_equal(q.get()[1], data)
    with pytest.raises(ValueError, match="lengths given for 'label', which is no component with a variable axis"):
        q.enqueue(image, tokens, label, lengths={"label": lengths})


def test_graph_enqueue_into_a_second_queue_keeps_lengths():
    import theano

    src, dst = queue(name="src"), queue(name="dst")
    image, tokens, label, lengths = src.dequeue(lengths=True)
    relay = theano.function([], dst.enqueue(image, tokens + 1, label, lengths={"tokens": lengths}))
    rows = [np.arange(4, dtype="int32"), np.arange(0, dtype="int32")]
    src.put(np.zeros((2, 3), np.uint8), rows, np.arange(2))
    relay()
    _, got, _, lens = dst.get(lengths=True)
    assert np.array_equal(got, [[1, 2, 3, 4], [PAD] * 4]) and np.array_equal(lens, [4, 0])
