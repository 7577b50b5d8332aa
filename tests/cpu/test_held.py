"""``Feeder(q, arrays, device=True)`` without a GPU: the refusals and argument checks, and the producer's
sampling, resume, statistics and release with the upload stood in for.

The stand-in replaces only ``HeldArrayProducer.upload`` (the engine's copy of
the arrays to the device, ``Ring.gather_on_device(arrays, "device")``) on a
host queue that passes for a GPU queue; the engine's gather of held rows is
tested against the stand-in CUDA driver (tests/standin/test_gather_fake.py, and the
Ring-level scenarios in tests/standin/test_gpu_scenarios.py), and the whole path on
a GPU by tests/gpu/test_gpu_held.py.
"""

import io

import numpy as np
import pytest
from helpers import drain
from pretend import pretend_gpu

import theano_queue as tq
from theano_queue.feed import held
from theano_queue.sampler import Sampler

ROWS = 4


def queue(capacity=3, batch=ROWS):
    return tq.Queue([("x", "float32", (batch, 3)), ("i", "int64", (batch,))], capacity=capacity, target="cpu")


def dataset(n=18):
    return np.arange(n * 3, dtype="float32").reshape(n, 3), np.arange(n, dtype="int64")


@pytest.fixture
def on_stand_in(monkeypatch):
    """Queues passed to it pass for GPU queues; uploads are recorded (the arrays) and refused while
    ``refuse`` holds an exception."""
    uploads, released, refuse = [], [], []

    def upload(producer):
        if refuse:
            raise refuse[0]
        uploads.append(list(producer.arrays))

    def gather_on_host(producer):  # called after the run and at shutdown: frees once
        if producer.attached:
            released.append(True)
        producer.attached = False

    monkeypatch.setattr(held.HeldArrayProducer, "upload", upload)
    monkeypatch.setattr(held.HeldArrayProducer, "gather_on_host", gather_on_host)

    def as_gpu_queue(q):
        return pretend_gpu(q)

    as_gpu_queue.uploads, as_gpu_queue.released, as_gpu_queue.refuse = uploads, released, refuse
    return as_gpu_queue


def feed(q, arrays, **args):
    with tq.Feeder(q, arrays, device=True, **args) as feeder:
        got = drain(q, timeout=30)
    return got, feeder


def feed_host(q, arrays, **args):
    with tq.Feeder(q, arrays, **args) as feeder:
        got = drain(q, timeout=30)
    return got, feeder


# ---- refusals and argument checks (the real code path) ---------------------------------------------


def test_a_cpu_queue_refuses_device_true_before_anything_is_queued():
    q = queue()
    with pytest.raises(ValueError, match=r"device=True .* queue '%s' is in host memory: leave device=False" % q.name):
        tq.Feeder(q, dataset(), shuffle=True, device=True)
    assert q.size() == 0 and not q.feeders
    q.put(np.zeros((ROWS, 3), "float32"), np.zeros(ROWS, "int64"))  # still usable
    assert q.size() == 1


@pytest.mark.parametrize("value", ["cuda0", 1, None])
def test_device_must_be_a_bool(value):
    with pytest.raises(TypeError, match=r"device must be True .* or False, got %r" % (value,)):
        tq.Feeder(queue(), dataset(), device=value)


def test_device_true_needs_an_array_dataset():
    x, i = dataset()
    with pytest.raises(TypeError, match=r"device=True holds an array dataset .* got an iterable of batches \(list\)"):
        tq.Feeder(queue(), [(x[:ROWS], i[:ROWS])], device=True)

    class Samples:
        def __len__(self):
            return len(x)

        def __getitem__(self, k):
            return x[k], i[k]

    with pytest.raises(TypeError, match=r"device=True holds an array dataset .* got a map-style dataset"):
        tq.Feeder(queue(), Samples(), device=True)
    with pytest.raises(TypeError, match=r"bucket_by, device and state need a dataset"):
        tq.Feeder(queue(), fill=lambda x, i: None, device=True)


def test_device_true_leaves_no_work_for_workers(on_stand_in):
    with pytest.raises(TypeError, match=r"device=True the GPU gathers the rows .* leave workers=0"):
        tq.Feeder(on_stand_in(queue()), dataset(), workers=1, device=True)
    assert not on_stand_in.uploads


def test_variable_length_components_are_refused_with_device_true():
    q = tq.Queue([("tokens", "int32", (ROWS, tq.upto(6)))], capacity=2, target="cpu")
    with pytest.raises(TypeError, match=r"an array dataset holds rows of one shape"):
        tq.Feeder(q, (np.zeros((8, 6), "int32"),), device=True)


def test_the_arrays_pass_the_same_door_as_a_host_array_dataset(on_stand_in):
    x, i = dataset()
    for kwargs in ({}, {"device": True}):
        with pytest.raises(TypeError, match=r"component 'i': expected dtype int64, got float64"):
            tq.Feeder(on_stand_in(queue()), (x, i.astype("float64")), **kwargs)
        with pytest.raises(ValueError, match=r"component 'x': expected rows of shape \(3,\)"):
            tq.Feeder(on_stand_in(queue()), (x[:, :2], i), **kwargs)
    assert not on_stand_in.uploads


def test_a_dataset_the_engine_cannot_hold_is_refused_by_start_naming_the_sizes(on_stand_in):
    x, i = dataset()
    q = on_stand_in(queue())
    on_stand_in.refuse.append(
        MemoryError("Feeder: queue 'q': the array dataset takes 2 GiB of device memory and the GPU has 1 GiB free")
    )
    feeder = tq.Feeder(q, (x, i), shuffle=True, device=True)
    with pytest.raises(ValueError) as caught:
        feeder.start()
    message = str(caught.value)
    assert message.startswith("Feeder(%s): device=True holds the array dataset in GPU memory" % q.name)
    assert "(x: %.3g GiB, i: %.3g GiB)" % (x.nbytes / 2**30, i.nbytes / 2**30) in message.replace("; ", " (")
    assert "the GPU has 1 GiB free" in message and "Leave device=False" in message
    assert not feeder.running and q.size() == 0 and not q.feeders and not on_stand_in.released
    on_stand_in.refuse.clear()
    got, _ = feed(q, (x, i))  # the queue is still usable
    assert len(got) == 5


# ---- what the device holds -------------------------------------------------------------------------


def test_contiguous_arrays_are_held_as_they_are_and_others_made_compact_once(on_stand_in):
    x, i = dataset(16)
    fortran = np.asfortranarray(x)
    for arrays, kept in (((x, i), [True, True]), ((fortran, i), [False, True]), ((x[::2], i[::2]), [False, False])):
        on_stand_in.uploads.clear()
        got, _ = feed(on_stand_in(queue()), arrays)
        holds = on_stand_in.uploads[0]
        assert [h is a for h, a in zip(holds, arrays)] == kept
        assert all(h.flags.c_contiguous for h in holds)
        assert [g[1].tolist() for g in got][0] == arrays[1][:ROWS].tolist()
    repeated = np.broadcast_to(x[:1], (16, 3))  # one row, stride 0: held as the one row it spans
    assert held.held_form(repeated, queue().components[0]) is repeated
    assert held.held_bytes(repeated) == 12 and held.held_bytes(x[::-1]) == x.nbytes


# ---- the producer's logic, with the upload stood in for -------------------------------------------


def test_every_sample_once_per_epoch_shuffled_per_epoch_as_the_host_array_dataset(on_stand_in):
    x, i = dataset(18)
    got, feeder = feed(on_stand_in(queue()), (x, i), shuffle=True, seed=3, epochs=2)
    sampler = Sampler(18, ROWS, shuffle=True, seed=3, epochs=2)
    assert len(got) == 2 * sampler.batches_per_epoch == 10
    for position, (xb, ib) in enumerate(got):
        np.testing.assert_array_equal(ib, sampler.batch(position))
        np.testing.assert_array_equal(xb, x[ib])
    epochs = [np.concatenate([ib for _, ib in got[e * 5 : (e + 1) * 5]]) for e in range(2)]
    assert all(sorted(e.tolist()) == list(range(18)) for e in epochs)
    assert epochs[0].tolist() != epochs[1].tolist()
    assert [len(ib) for _, ib in got[:5]] == [4, 4, 4, 4, 2]  # a partial last batch
    host, _ = feed_host(queue(), (x, i), shuffle=True, seed=3, epochs=2)
    assert [ib.tolist() for _, ib in got] == [ib.tolist() for _, ib in host]
    stats = feeder.stats()
    assert stats["gather"] == {"x": "device", "i": "device"} and stats["samples"] == 36 and stats["elements"] == 10
    assert len(on_stand_in.uploads) == 1  # uploaded once for both epochs
    assert on_stand_in.released == [True]  # and freed once, when the run ended


def test_a_feeder_stopped_early_frees_the_device_copy(on_stand_in):
    x, i = dataset(400)
    q = on_stand_in(queue(capacity=2))
    with tq.Feeder(q, (x, i), epochs=None, close_when_done=False, device=True):
        q.get(timeout=30)
    assert on_stand_in.released == [True]


def test_resume_mid_epoch_loses_and_repeats_nothing(on_stand_in):
    x, i = dataset(18)
    q = on_stand_in(queue(capacity=2))
    taken = []
    with tq.Feeder(q, (x, i), shuffle=True, seed=5, epochs=2, close_when_done=False, device=True) as feeder:
        for _ in range(3):
            taken.append(q.get(timeout=30)[1])
        state = feeder.state_dict()
    q.close(cancel_pending=True)
    q.reopen()
    assert state["position"] == 3
    rest, _ = feed(q, (x, i), shuffle=True, seed=5, epochs=2, state=state)
    order = [ib.tolist() for ib in taken] + [ib.tolist() for _, ib in rest]
    sampler = Sampler(18, ROWS, shuffle=True, seed=5, epochs=2)
    assert order == [sampler.batch(p).tolist() for p in range(10)]


def test_shards_are_disjoint_and_together_the_epoch(on_stand_in):
    x, i = dataset(18)
    seen = []
    for rank in range(3):
        got, _ = feed(on_stand_in(queue()), (x, i), shuffle=True, seed=1, shard=(rank, 3))
        seen.append([k for _, ib in got for k in ib.tolist()])
    assert all(len(s) == 6 for s in seen)
    assert sorted(sum(seen, [])) == list(range(18))


def test_the_monitor_watches_it_as_any_feeder(on_stand_in):
    out = io.StringIO()
    x, i = dataset(18)
    got, feeder = feed(on_stand_in(queue()), (x, i), shuffle=True, epochs=2, progress={"file": out, "interval": 0.01})
    assert len(got) == feeder.planned_elements == 10
    assert "10/10" in out.getvalue() and "%s: " % feeder.queue.name in out.getvalue()


def test_a_host_array_datasets_state_resumes_on_the_device(on_stand_in):
    x, i = dataset(18)
    q = queue(capacity=2)
    with tq.Feeder(q, (x, i), shuffle=True, seed=2, close_when_done=False) as feeder:  # gathered on the host
        taken = [q.get(timeout=30)[1].tolist() for _ in range(2)]
        state = feeder.state_dict()
    q.close(cancel_pending=True)
    q.reopen()
    rest, _ = feed(on_stand_in(q), (x, i), shuffle=True, seed=2, state=state)
    sampler = Sampler(18, ROWS, shuffle=True, seed=2)
    assert taken + [ib.tolist() for _, ib in rest] == [sampler.batch(p).tolist() for p in range(5)]
