"""The queue on a GPU: GpuDequeue/GpuEnqueue, the device ring, its memory.

Run on a machine where Theano runs on CUDA (THEANO_FLAGS=device=cuda0):
``pytest tests/gpu``.  Skipped elsewhere.
"""

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from helpers import TAGGED, holding_the_gil, put_waiting_for_room, seconds_to_stop_on_ctrl_c, two_producers_exactly_once
from staging import staging_holds

import theano_queue as tq

pytestmark = pytest.mark.gpu

MIXED = [("image", "uint8", (32, 3, 8, 8)), ("features", "float32", (32, 17)), ("label", "int32", (32,))]


def mixed_batches(count, seed):
    """Random batches of MIXED; every seventh is partial."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        rows = 32 if i % 7 else int(rng.integers(1, 32))
        yield (
            rng.integers(0, 256, (rows, 3, 8, 8), dtype=np.uint8),
            rng.standard_normal((rows, 17)).astype("float32"),
            rng.integers(-(2**31), 2**31 - 1, rows, dtype=np.int64).astype("int32"),
        )


def op_names(f):
    return [type(node.op).__name__ for node in f.maker.fgraph.toposort()]


def test_queue_lives_on_the_gpu_by_default():
    q = tq.Queue(MIXED)
    assert q.on_gpu and q.target == "gpu"
    assert q.stats()["backend"] == "cuda"


def test_dequeued_data_is_bit_exact_for_2000_mixed_batches():
    import theano

    q = tq.Queue(MIXED, capacity=3)
    image, features, label = q.dequeue()
    # Some compute on the GPU, and the raw values back for checking.
    f = theano.function([], [image, features, label, (features * 2).sum()])
    assert "GpuDequeue" in op_names(f) and "Dequeue" not in op_names(f)
    with tq.Feeder(q, mixed_batches(2000, seed=1)):
        for i, expected in enumerate(mixed_batches(2000, seed=1)):
            *got, doubled = f()
            for want, have in zip(expected, got):
                assert have.dtype == want.dtype and have.shape == want.shape, i
                assert np.array_equal(have, want), "batch %d differs" % i
            np.testing.assert_allclose(doubled, 2 * expected[1].sum(dtype="float64"), rtol=1e-4)
        with pytest.raises(tq.QueueClosed):
            f()


def test_two_producers_exactly_once_in_order():
    import theano

    q = tq.Queue(TAGGED, capacity=3)
    f = theano.function([], q.dequeue())
    two_producers_exactly_once(q, f, per_producer=1500)


@pytest.mark.parametrize("slow", ["producer", "consumer"])
def test_back_pressure_both_ways(slow):
    import theano

    q = tq.Queue(MIXED, capacity=2)
    f = theano.function([], q.dequeue())
    expected = list(mixed_batches(40, seed=2))

    def source():
        for element in expected:
            if slow == "producer":
                time.sleep(0.005)
            yield element

    with tq.Feeder(q, source()):
        for want in expected:
            if slow == "consumer":
                time.sleep(0.005)
            got = f()
            assert all(np.array_equal(a, b) for a, b in zip(got, want))
    stats = q.stats()
    waited = stats["consumer_wait_s"] if slow == "producer" else stats["producer_wait_s"]
    assert waited > 0.05, stats


def test_gpu_enqueue_to_gpu_dequeue_round_trip():
    import theano

    source = tq.Queue(MIXED, capacity=2, name="source")
    sink = tq.Queue([("features", "float32", (32, 17)), ("label", "int32", (32,))], capacity=2, name="sink")
    _, features, label = source.dequeue()
    produce = theano.function([], sink.enqueue(features * 3, label))
    consume = theano.function([], sink.dequeue())
    assert "GpuEnqueue" in op_names(produce)
    assert "GpuDequeue" in op_names(consume)
    for element in mixed_batches(30, seed=3):
        source.put(*element)
        assert int(produce()) == 1
        features_out, label_out = consume()
        np.testing.assert_array_equal(features_out, 3 * element[1])
        np.testing.assert_array_equal(label_out, element[2])


def test_uploads_left_to_the_next_take_arrive_exact_and_none_outlives_a_drop():
    # A put with elements ahead of its own leaves its upload to the consumer's next take (doc/design.rst,
    # "Small steps"); tests/standin/test_device_fake.py checks who calls what, this checks the data on the GPU.
    import pygpu
    import theano
    from theano.gpuarray.type import get_context

    q = tq.Queue([("x", "float32", (4096,))], capacity=3)
    step = theano.function([], q.dequeue())

    def element(i):
        return np.full(4096, i, np.float32)

    for round_ in range(20):
        base = 10 * round_
        for i in range(3):
            q.put(element(base + i))
        for i in range(3):
            assert np.array_equal(step(), element(base + i)), (round_, i)
    q.put(element(1))
    q.put(element(2))  # its upload is left to a take that never comes
    q.close(cancel_pending=True)
    q.reopen()
    for i in (3, 4, 5):  # device puts into the slots, one the dropped upload was left for
        q.put(pygpu.gpuarray.array(element(i), context=get_context(None)))
    for i in (3, 4, 5):
        assert np.array_equal(step(), element(i)), i


def test_host_get_reads_back_from_the_device():
    q = tq.Queue(MIXED, capacity=2)
    element = next(mixed_batches(1, seed=4))
    q.put(*element)
    got = q.get()
    assert all(np.array_equal(a, b) for a, b in zip(got, element))


def test_writer_fills_pinned_staging_in_place():
    import theano

    q = tq.Queue(MIXED, capacity=2)
    f = theano.function([], q.dequeue())
    batches = list(mixed_batches(20, seed=5))
    for element in batches:
        with q.writer() as slot:
            for view, part in zip(slot.arrays, element):
                view[: len(part)] = part
            # Before the put: the views are the slot's pinned staging itself.
            assert all(staging_holds(q._ring, c, view) for c, view in enumerate(slot.arrays))
            slot.rows = len(element[0])
        got = f()
        assert all(np.array_equal(a, b) for a, b in zip(got, element))


def test_a_put_waiting_for_room_completes_while_a_step_holds_the_gil():
    # The step's GpuDequeue frees a slot and keeps the GIL (it updates a GPU
    # shared variable: nothing is read back).  The waiting put copies its
    # element into the slot's pinned staging and issues the copy to the
    # device meanwhile, without waiting for the GIL.
    import theano

    q = tq.Queue([("x", "float32", (4, 4))], capacity=2)
    sink = theano.shared(np.zeros((4, 4), "float32"))
    step = theano.function([], [], updates=[(sink, q.dequeue())])
    assert "GpuDequeue" in op_names(step)
    waiting = put_waiting_for_room(q, [np.zeros((4, 4), "float32")] * 2, np.ones((4, 4), "float32"))

    def step_then_hold():
        step()
        return holding_the_gil(0.3, q.size)

    assert step_then_hold() == 2
    waiting.join(10)
    step()
    step()
    np.testing.assert_array_equal(np.asarray(sink.get_value()), np.ones((4, 4), "float32"))


def test_500_queues_give_their_memory_back():
    import gc

    from theano.gpuarray.type import get_context

    from theano_queue import _engine

    gc.collect()
    context = get_context(None).ptr
    free_before, _ = _engine.cuda_mem_info(context)
    held_before = _engine.cuda_allocated()
    for i in range(500):
        q = tq.Queue([("x", "float32", (256, 1024))], capacity=2, name="q%d" % i)  # 2 MiB slots
        q.put(np.full((256, 1024), i, "float32"))
        assert q.get()[0][0, 0] == i
        del q
    gc.collect()
    assert _engine.cuda_allocated() == held_before
    free_after, _ = _engine.cuda_mem_info(context)
    assert abs(free_after - free_before) < 64 << 20, (free_before, free_after)


def test_close_timeout_and_feeder_error_on_the_gpu():
    import theano

    q = tq.Queue(MIXED, capacity=2, timeout=0.2)
    f = theano.function([], q.dequeue())
    with pytest.raises(tq.QueueTimeout):
        f()

    def failing():
        yield from mixed_batches(2, seed=7)
        raise KeyError("label file missing")

    with tq.Feeder(q, failing()):
        f()
        f()
        with pytest.raises(tq.FeederError, match="label file missing") as info:
            f()
    assert isinstance(info.value.__cause__, KeyError)
    q.close(cancel_pending=True)
    q.reopen()
    q.put(*next(mixed_batches(1, seed=8)))
    q.close()
    f()
    with pytest.raises(tq.QueueClosed):
        f()


def child_env(flags=""):
    """This process's environment for a child that initialises its own GPU.

    Theano marks the environment once it has taken the GPU, and a child that
    inherits the mark silently falls back to the CPU: drop it.
    """
    env = dict(os.environ)
    env.pop("THEANO_GPU_IS_ALREADY_ACTIVE", None)
    if flags:
        env["THEANO_FLAGS"] = env.get("THEANO_FLAGS", "") + "," + flags
    return env


def run_script(script, flags="", timeout=120):
    return subprocess.run(
        [sys.executable, "-c", script], env=child_env(flags), capture_output=True, text=True, timeout=timeout
    )


STREAM_SCRIPT = textwrap.dedent(
    """
    import numpy as np, theano, theano.tensor as T, theano_queue as tq
    q = tq.Queue([("a", "float32", (256, 256)), ("b", "uint8", (256, 256))], capacity=3)
    a, b = q.dequeue()
    w = theano.shared(np.eye(256, dtype="float32") * 2)
    f = theano.function([], [T.dot(a, w), T.cast(b, "float32") + 1])
    assert q.on_gpu and any(type(n.op).__name__ == "GpuDequeue" for n in f.maker.fgraph.toposort())
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((256, 256)).astype("float32"),
                rng.integers(0, 255, (256, 256), dtype=np.uint8)) for _ in range(200)]
    with tq.Feeder(q, batches):
        for a_in, b_in in batches:
            a_out, b_out = f()
            assert np.allclose(a_out, 2 * a_in, atol=1e-5), "matmul result differs"
            assert np.array_equal(b_out, b_in.astype("float32") + 1)
    print("ok", theano.config.gpuarray.single_stream)
    """
)


@pytest.mark.parametrize("single_stream", [True, False])
def test_correct_with_single_stream_true_and_false(single_stream):
    done = run_script(STREAM_SCRIPT, "gpuarray.single_stream=%s" % single_stream)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["ok", str(single_stream)]


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import sys, theano, theano_queue as tq
    q = tq.Queue([("x", "float32", (2,))])
    f = theano.function([], q.dequeue())
    assert q.on_gpu
    print("ready", flush=True)
    try:
        f()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
    """
)


def test_ctrl_c_stops_a_blocked_gpu_dequeue():
    elapsed = seconds_to_stop_on_ctrl_c(CTRL_C_SCRIPT, child_env())
    assert elapsed < 2.0, "took %.3f s to reach Python" % elapsed  # 50 ms slices, and a loaded machine


TWO_CONTEXTS_SCRIPT = textwrap.dedent(
    """
    import numpy as np, theano, theano_queue as tq
    queues = [tq.Queue([("x", "float32", (64, 64))], capacity=2, target=name) for name in ("dev0", "dev1")]
    assert all(q.on_gpu for q in queues)
    fs = [theano.function([], q.dequeue() * 2) for q in queues]
    for i in range(50):
        for k, q in enumerate(queues):
            q.put(np.full((64, 64), i + 1000 * k, "float32"))
        for k, f in enumerate(fs):
            assert f()[0, 0] == 2 * (i + 1000 * k)
    print("ok", [q.target for q in queues])
    """
)


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def run_with_named_contexts(script, contexts):
    """Runs script with device=cpu and Theano's contexts= flag; returns its stdout after checking that it
    succeeded and logged no error (Theano's GraphToGPU logs one when it cannot infer a context)."""
    env = child_env()
    others = [f for f in env.get("THEANO_FLAGS", "").split(",") if f and not f.startswith("device=")]
    env["THEANO_FLAGS"] = ",".join(others + ["device=cpu", "contexts=" + contexts])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ERROR" not in done.stderr and "Could not infer context" not in done.stderr, done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(gpu_count() < 2, reason="needs two GPUs (the nvidia-h200-x2 machine)")
def test_two_contexts_one_queue_each():
    assert "ok ['dev0', 'dev1']" in run_with_named_contexts(TWO_CONTEXTS_SCRIPT, "dev0->cuda0;dev1->cuda1")


NAMED_CONTEXT_SCRIPT = textwrap.dedent(
    """
    import numpy as np, theano, theano_queue as tq
    q = tq.Queue([("x", "float32", (64, 64))], capacity=2, target="dev0")
    f = theano.function([], q.dequeue() * 2)
    q.put(np.full((64, 64), 3, "float32"))
    assert f()[0, 0] == 6
    print("ok", q.target)
    """
)


def test_a_named_context_with_device_cpu_compiles_without_an_error_log():
    # With device=cpu Theano's GraphToGPU finds no default context: the queue's
    # token must tell it which one.
    assert "ok dev0" in run_with_named_contexts(NAMED_CONTEXT_SCRIPT, "dev0->cuda0")
