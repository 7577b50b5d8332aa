"""bench/step_profile.py: a small step fed at other copy-pool sizes, taking turns with the rest (issue 43.1)."""

import pytest

from bench.step_profile import profile
from theano_queue import _engine

#: What table() reads besides the rows.
FAKE_RESULT = {
    "shape": "16x8",
    "hidden": 8,
    "device": "cpu",
    "target": "cpu",
    "steps": 4,
    "rounds": 3,
    "producer us/batch": {},
}


@pytest.fixture
def floor_stand_in(tmp_path, monkeypatch):
    """bench/step_floor.c loaded against the stand-in driver, with a context current, a compute and a copy
    stream, the filled and consumed events, and 64 bytes of device memory:
    (library, driver, device pointer, (ctx, compute, copy, filled, consumed))."""
    import ctypes
    import shutil

    from bench import step_floor
    from tests.support.fake_cuda import compile_stand_in

    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    library = str(tmp_path / "libcuda.so.1")
    compile_stand_in(library)
    monkeypatch.setenv("THEANO_QUEUE_LIBCUDA", library)
    c = step_floor._c_library()
    cu = ctypes.CDLL(library)
    handles = ctx, compute, copy, filled, consumed = tuple(ctypes.c_void_p() for _ in range(5))
    assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cu.cuCtxPushCurrent_v2(ctx) == 0
    for stream in (compute, copy):
        assert cu.cuStreamCreate(ctypes.byref(stream), 1) == 0
    for event in (filled, consumed):
        assert cu.cuEventCreate(ctypes.byref(event), 3) == 0
    device = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(device), ctypes.c_size_t(64)) == 0
    return c, cu, device, handles


def test_copy_thread_turns_add_array_and_iterable_rows_and_give_the_pool_back():
    """Each pool size named adds its own array and iterable rows; the pool is the process's again afterwards."""
    threads = _engine.copy_threads()
    result = profile(16, 8, hidden=8, steps=4, rounds=2, switch_intervals=(), trace=0, copy_thread_turns=(1, 3))
    rows = {r["part"]: r for r in result["rows"]}
    turns = ["array, 1 copy thread", "iterable, 1 copy thread", "array, 3 copy threads", "iterable, 3 copy threads"]
    assert list(rows)[-4:] == turns
    for name in turns:
        assert rows[name]["us/step"] > 0 and rows[name]["x resident"] > 0
    assert _engine.copy_threads() == threads


def test_floor_adds_the_sliced_step_and_times_it_on_the_host():
    """--floor adds the no-queue floors; on the host the sliced step is timed and the driver calls' are not
    (a host queue makes none), and the sliced step trains the same model as the resident one."""
    result = profile(16, 8, hidden=8, steps=4, rounds=2, switch_intervals=(), trace=0, floor=True)
    rows = {r["part"]: r for r in result["rows"]}
    floors = [
        "resident + record",
        "resident + query, record",
        "resident + wait, record",
        "resident + upload, wait, record",
        "resident + host copy, upload, wait, record",
        "resident + Python copy, upload, wait, record",
        "resident, sliced",
    ]
    assert list(rows)[-7:] == floors
    assert rows["resident, sliced"]["us/step"] > 0
    for name in floors[:-1]:
        assert rows[name]["us/step"] != rows[name]["us/step"]  # nan: no GPU


def test_the_sliced_batch_walks_the_dataset_a_batch_a_step():
    import numpy as np
    import theano

    from bench.step_floor import sliced_batch

    data = np.arange(40, dtype="float32").reshape(10, 4)
    labels = np.arange(10, dtype="int32")
    x, y, updates = sliced_batch(data, labels, 3)
    step = theano.function([], [x, y], updates=updates)
    seen = [step() for _ in range(4)]
    for i, (xs, ys) in enumerate(seen):
        first = 3 * (i % 3)  # 10 // 3 = 3 whole batches, then the first again
        np.testing.assert_array_equal(np.asarray(xs), data[first : first + 3])
        np.testing.assert_array_equal(np.asarray(ys), labels[first : first + 3])


def test_each_floor_makes_the_calls_of_its_dequeue_in_order(floor_stand_in, tmp_path, monkeypatch):
    """bench/step_floor.c, against the stand-in driver: each floor makes the calls its name says, on the
    streams a dequeue makes them on, and a call that fails makes the step's calls fail."""
    import ctypes

    import numpy as np

    from bench import step_floor

    log = tmp_path / "calls"
    c, cu, device, (ctx, compute, copy, filled, consumed) = floor_stand_in
    floor_calls = c.floor_calls
    host = np.arange(16, dtype="float32")
    extents = (
        2,
        (ctypes.c_uint64 * 2)(device.value, device.value + 32),
        (ctypes.c_void_p * 2)(host.ctypes.data, host.ctypes.data + 32),
        (ctypes.c_size_t * 2)(32, 32),
    )

    def calls_of(names):
        log.write_text("")
        monkeypatch.setenv("FAKE_CUDA_LOG", str(log))
        what = sum(step_floor._CALL_BITS[c] for c in names if c != "record")
        rc = floor_calls(ctx, compute, copy, filled, consumed, *extents, 0, what)
        monkeypatch.delenv("FAKE_CUDA_LOG")
        return rc, log.read_text().split("\n")[:-1]

    assert (
        floor_calls(ctx, compute, copy, filled, consumed, *extents, 0, step_floor._CALL_BITS["copy"]) == -1
    )  # no copier
    dataset, into = np.arange(48, dtype="float32"), np.zeros(16, "float32")
    assert c.floor_copier_start(dataset.ctypes.data, 64, 3, into.ctypes.data, 1, 64) == 0
    rc, (record,) = calls_of(["record"])
    assert rc == 0 and record.startswith("record ")
    on_compute = record.split()[1]
    made = {name: calls_of(calls) for name, calls in step_floor.CALL_FLOORS.items()}
    assert all(rc == 0 for rc, _ in made.values())
    on_copy = made["resident + upload, wait, record"][1][0].split()[1]
    assert on_copy != on_compute
    assert made["resident + query, record"][1] == ["query", "record " + on_compute]
    assert made["resident + wait, record"][1] == ["wait " + on_compute, "record " + on_compute]
    assert made["resident + upload, wait, record"][1] == [
        "wait " + on_copy,
        "upload " + on_copy,
        "upload " + on_copy,
        "record " + on_copy,
        "wait " + on_compute,
        "record " + on_compute,
    ]
    # The host copy is no driver call: the same calls, and the copier copied the dataset's batches in turn.
    assert made["resident + host copy, upload, wait, record"][1] == made["resident + upload, wait, record"][1]
    for _ in range(4):
        assert calls_of(["copy", "record"])[0] == 0
    assert c.floor_copier_stop() == 5  # every copy asked for was made before it stopped
    np.testing.assert_array_equal(into, dataset[16:32])  # the fifth: batches 0, 1, 2, 0, 1
    np.testing.assert_array_equal(
        np.ctypeslib.as_array(ctypes.cast(device.value, ctypes.POINTER(ctypes.c_float)), (16,)), host
    )
    monkeypatch.setenv("FAKE_CUDA_FAIL", "cuMemcpyHtoDAsync_v2")
    assert calls_of(["upload", "wait", "record"])[0] != 0


def test_the_host_copy_floor_writes_a_ring_of_slots_and_uploads_the_one_written_the_step_before(floor_stand_in):
    """As an array dataset's producer does: each step's host copy goes into the next of the registered slots
    that the uploads read, and the step's upload reads the slot its copy of the step before filled (never
    the one being written), not one private buffer that stays in the copier's cache."""
    import ctypes
    import time

    import numpy as np

    from bench import step_floor

    c, cu, device, (ctx, compute, copy, filled, consumed) = floor_stand_in
    dataset = np.arange(64, dtype="float32")  # four batches of 16
    slots = np.full(3 * 16, -1, "float32")  # three slots of one 64-byte component
    extents = (
        1,
        (ctypes.c_uint64 * 1)(device.value),
        (ctypes.c_void_p * 1)(slots.ctypes.data),
        (ctypes.c_size_t * 1)(64),
    )
    uploaded = np.ctypeslib.as_array(ctypes.cast(device.value, ctypes.POINTER(ctypes.c_float)), (16,))
    assert c.floor_copier_start(dataset.ctypes.data, 64, 4, slots.ctypes.data, 3, 64) == 0
    what = sum(step_floor._CALL_BITS[name] for name in ("copy", "upload", "wait"))
    try:
        for step in range(5):
            offset = step_floor.upload_slot(step, 3) * 64
            assert c.floor_calls(ctx, compute, copy, filled, consumed, *extents, offset, what) == 0
            if step:  # the slot copied the step before: batch step - 1, in slot (step - 1) % 3
                np.testing.assert_array_equal(uploaded, dataset[16 * (step - 1) : 16 * step])
            deadline = time.monotonic() + 10
            while c.floor_copier_made() < step + 1 and time.monotonic() < deadline:
                time.sleep(0.001)  # this step's copy lands before the next step uploads it
    finally:
        assert c.floor_copier_stop() == 5
    # Batches 0, 1, 2, 3, 0 went into slots 0, 1, 2, 0, 1.
    np.testing.assert_array_equal(slots, np.concatenate([dataset[48:64], dataset[0:16], dataset[32:48]]))


def test_the_python_copier_copies_the_batches_into_the_slots_in_turn_and_stops_after_the_last_asked():
    """The Python copy floor's thread: one batch a wake, the batches cycled and the slots in turn, every
    copy asked for made before stop() returns, and no thread left behind."""
    import threading

    import numpy as np

    from bench import step_floor

    batches = [(np.full(4, k, "float32"), np.full(2, 10 * k, "int32")) for k in range(4)]
    slots = [(np.zeros(4, "float32"), np.zeros(2, "int32")) for _ in range(3)]
    copier = step_floor.PythonCopier(batches, slots)
    for _ in range(5):
        copier.wake()
    assert copier.stop() == 5
    assert not any(t.name == "step_floor Python copier" for t in threading.enumerate())
    # Batches 0, 1, 2, 3, 0 went into slots 0, 1, 2, 0, 1.
    assert [int(x[0]) for x, _ in slots] == [3, 0, 2] and [int(y[0]) for _, y in slots] == [30, 0, 20]
    assert step_floor.upload_slot(0, 3) == 2 and step_floor.upload_slot(4, 3) == 0  # never the slot being filled


def test_the_floors_driver_calls_are_closed_when_a_round_fails(monkeypatch):
    """The floors' stream, events and registered memory are given back whatever stops the rounds."""

    from bench import step_profile

    closed = []

    class Calls:
        def close(self):
            closed.append(True)

    def add_floors(case):
        case.sliced, case.calls = case.resident, Calls()

    def failing(case, part, steps):
        raise RuntimeError("a round failed")

    monkeypatch.setattr(step_profile.Case, "add_floors", add_floors)
    monkeypatch.setattr(step_profile, "measure", failing)
    with pytest.raises(RuntimeError, match="a round failed"):
        profile(16, 8, hidden=8, steps=4, rounds=2, switch_intervals=(), trace=0, floor=True)
    assert closed == [True]


def test_each_part_is_also_held_against_the_resident_step_of_its_own_round(monkeypatch):
    """Besides the best of the rounds, each part's ratio to the resident step of the same round, as the
    median over the rounds and their spread (the quartiles' distance): a machine whose speed moves between
    rounds moves both steps of a round together, and the ratio stays."""
    from bench import step_profile

    seconds = {"resident": iter([1.0, 2.0, 1.0]), "array": iter([2.0, 2.0, 1.5])}

    def measure(case, part, steps):
        return next(seconds[part]) if part in seconds else 1.0

    monkeypatch.setattr(step_profile, "PARTS", ("resident", "array"))
    monkeypatch.setattr(step_profile, "measure", measure)
    monkeypatch.setattr(step_profile, "producer_cost_us", lambda case, count: {})
    rows = {r["part"]: r for r in profile(16, 8, hidden=8, steps=4, rounds=3, switch_intervals=(), trace=0)["rows"]}
    assert rows["resident"]["x resident, paired"] == 1.0 and rows["resident"]["spread"] == 0.0
    assert rows["array"]["x resident"] == 1.5  # the best of the array's rounds over the best resident one
    assert rows["array"]["x resident, paired"] == 1.5  # the median of 2.0, 1.0, 1.5
    assert rows["array"]["spread"] == 0.5  # its quartiles: 1.25 and 1.75
    assert "x resident, paired" in step_profile.table({**FAKE_RESULT, "rows": list(rows.values())})


def test_scenario_19_reports_each_floor_per_shape_the_python_copy_included(monkeypatch):
    """bench/run.py's small steps: per shape, the upload floor, the host copy floor and the Python copy floor
    (a Python iterable's), in the result and, on a GPU, in the headline."""
    import argparse

    from bench import run, step_profile

    def fake_profile(batch, cols, hidden, **kwargs):
        parts = {"array": 1.2, "held": 1.1, "iterable": 1.3, "resident + upload, wait, record": 1.01}
        parts.update({"resident + host copy, upload, wait, record": 1.02, "resident, sliced": 1.04})
        parts.update({"resident + Python copy, upload, wait, record": 1.03})
        # The best rounds' ratios are not what is reported: the paired medians are.
        rows = [{"part": p, "x resident": x - 0.5, "x resident, paired": x} for p, x in parts.items()]
        return {"shape": "%dx%d" % (batch, cols), "rows": rows, "producer us/batch": {}}

    monkeypatch.setattr(step_profile, "profile", fake_profile)
    monkeypatch.setattr(run, "torch_small_steps", lambda b, shapes, steps, rounds: {"prefetched": {}})
    result = run.small_steps(argparse.Namespace(on_gpu=True, quick=True))
    assert result["Python copy floor"] == {"256x784": 1.03, "500x784": 1.03}
    assert result["host copy floor"] == {"256x784": 1.02, "500x784": 1.02}
    assert result["upload floor"] == {"256x784": 1.01, "500x784": 1.01}
    assert "with a Python copy beside: 256x784 1.030" in result["headline"]
    assert result["ratios"]["256x784 array"] == 1.2
    # Each fed part over its own kind's floor: the host copy's, the sliced step's, the Python copy's.
    over = result["over its floor"]
    assert over["256x784 array"] == pytest.approx(1.2 / 1.02) and over["500x784 held"] == pytest.approx(1.1 / 1.04)
    assert over["256x784 iterable"] == pytest.approx(1.3 / 1.03)
    assert "over its floor" in result["headline"]


def test_scenario_19_leaves_out_a_floor_it_could_not_measure(monkeypatch):
    """On the CPU the driver calls' floors are nan: no part is held against them (held has none either)."""
    import argparse

    from bench import run, step_profile

    nan = float("nan")

    def fake_profile(batch, cols, hidden, **kwargs):
        parts = {"array": 1.2, "held": nan, "iterable": 1.3, "resident, sliced": 1.04}
        parts.update({key: nan for key in run.SMALL_STEP_FLOORS.values()})
        rows = [{"part": p, "x resident": x, "x resident, paired": x} for p, x in parts.items()]
        return {"shape": "%dx%d" % (batch, cols), "rows": rows, "producer us/batch": {}}

    monkeypatch.setattr(step_profile, "profile", fake_profile)
    result = run.small_steps(argparse.Namespace(on_gpu=False, quick=True))
    assert result["over its floor"] == {}
    assert set(result["ratios"]) == {"256x784 array", "256x784 iterable", "500x784 array", "500x784 iterable"}
