"""``Feeder(q, arrays, device=True)`` without a GPU: the refusals and argument checks, and the producer's
sampling, resume and statistics with the device part stood in for by host memory.

The stand-in (:class:`HostDeviceArrays`) replaces only
``theano_queue.feed.resident.DeviceArrays`` (the upload and the gather) and
the free-memory query; everything else, the sampler, the runs, the progress
log behind ``state_dict``, the puts, is the producer's own.  The device path
itself is tested on a GPU by tests/test_gpu_resident.py.
"""
import numpy as np
import pytest

import theano_queue as tq
from helpers import drain
from theano_queue.feed import resident
from theano_queue.sampler import Sampler
from theano_queue.target import Target

ROWS = 4


def queue(capacity=3, batch=ROWS):
    return tq.Queue([("x", "float32", (batch, 3)), ("i", "int64", (batch,))], capacity=capacity, target="cpu")


def dataset(n=18):
    return np.arange(n * 3, dtype="float32").reshape(n, 3), np.arange(n, dtype="int64")


class HostDeviceArrays:
    """DeviceArrays' interface over host memory: what the producer asks of the device, and a record of it."""

    made = []

    def __init__(self, arrays, components, context_name, queue_name, index_rows=0):
        self.arrays = [np.ascontiguousarray(a, dtype=c.dtype) for a, c in zip(arrays, components)]
        self.gathers, self.released = [], False
        HostDeviceArrays.made.append(self)

    def current(self):
        import contextlib

        return contextlib.nullcontext()

    def gather(self, indices):
        self.gathers.append(len(indices))
        return [a[indices] for a in self.arrays]

    def batch(self, gathered, first, last):
        return tuple(g[first:last] for g in gathered)

    def release(self):
        self.released = True


@pytest.fixture
def on_stand_in(monkeypatch):
    """Queues passed to it pass for GPU queues; the device is host memory with ``free`` bytes (1 GiB)."""
    HostDeviceArrays.made = []
    monkeypatch.setattr(resident, "DeviceArrays", HostDeviceArrays)
    free = {"bytes": 1 << 30}
    monkeypatch.setattr(resident, "free_device_bytes", lambda context_name: free["bytes"])

    def as_gpu_queue(q):
        q._target = q._port._target = Target("gpu", True)
        return q

    as_gpu_queue.free = free
    return as_gpu_queue


def feed(q, arrays, **args):
    with tq.Feeder(q, arrays, device=True, **args) as feeder:
        got = drain(q, timeout=30)
    return got, feeder


# ---- refusals and argument checks (the real code path, no stand-in) --------------------------------


def test_a_cpu_queue_refuses_device_true_before_anything_is_queued():
    q = queue()
    with pytest.raises(ValueError, match=r"device=True .* queue '%s' lives in host memory; leave device=False"
                       % q.name):
        tq.Feeder(q, dataset(), shuffle=True, device=True)
    assert q.size() == 0 and not q._feeders
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
    with pytest.raises(TypeError, match=r"device=True the rows are gathered on the GPU.*leave workers=0"):
        tq.Feeder(on_stand_in(queue()), dataset(), workers=1, device=True)
    assert not HostDeviceArrays.made


def test_variable_length_components_are_refused_with_device_true():
    q = tq.Queue([("tokens", "int32", (ROWS, tq.upto(6)))], capacity=2, target="cpu")
    with pytest.raises(TypeError, match=r"an array dataset holds rows of one shape"):
        tq.Feeder(q, (np.zeros((8, 6), "int32"),), device=True)


def test_the_arrays_pass_the_same_door_as_a_host_array_dataset(on_stand_in):
    x, i = dataset()
    for kwargs in ({}, {"device": True}):
        with pytest.raises(TypeError, match=r"component 'i': expected dtype int64, got float64, which does not "
                                            r"cast safely to it"):
            tq.Feeder(on_stand_in(queue()), (x, i.astype("float64")), **kwargs)
        with pytest.raises(ValueError, match=r"component 'x': expected rows of shape \(3,\)"):
            tq.Feeder(on_stand_in(queue()), (x[:, :2], i), **kwargs)
    assert not HostDeviceArrays.made


def test_a_dataset_larger_than_free_device_memory_is_refused_before_any_upload(on_stand_in):
    huge = np.lib.stride_tricks.as_strided(np.zeros(3, "float32"), shape=(1 << 28, 3), strides=(0, 4))  # 3 GiB
    labels = np.lib.stride_tricks.as_strided(np.zeros(1, "int64"), shape=(1 << 28,), strides=(0,))  # 2 GiB
    q = on_stand_in(queue())
    with pytest.raises(ValueError) as caught:
        tq.Feeder(q, (huge, labels), shuffle=True, device=True)
    message = str(caught.value)
    assert "Feeder(%s): device=True holds the array dataset in device memory, and it does not fit" % q.name in message
    assert "its 268435456 rows take 5 GiB (x: 3 GiB, i: 2 GiB)" in message
    assert "the GPU has 1 GiB free" in message and "device=False" in message
    assert not HostDeviceArrays.made and q.size() == 0


def test_the_batches_in_flight_count_against_free_memory(on_stand_in):
    x, i = dataset()
    on_stand_in.free["bytes"] = x.nbytes + i.nbytes  # the dataset alone fits; its gathers do not
    with pytest.raises(ValueError, match=r"and the batches being gathered"):
        tq.Feeder(on_stand_in(queue()), (x, i), device=True)
    on_stand_in.free["bytes"] = x.nbytes + i.nbytes + 2 * resident.batches_per_gather(queue().components) * (
        ROWS * 3 * 4 + ROWS * 8)
    feed(on_stand_in(queue()), (x, i))  # exactly enough


def test_an_upload_that_fails_names_the_sizes(on_stand_in, monkeypatch):
    class OutOfMemory(Exception):
        pass

    def failing(*args, **kwargs):
        raise OutOfMemory("cuMemAlloc: out of memory")

    monkeypatch.setattr(resident, "DeviceArrays", failing)
    with pytest.raises(ValueError, match=r"device=True could not upload the array dataset \(.* GiB\) to the GPU: "
                                         r"OutOfMemory: cuMemAlloc: out of memory"):
        tq.Feeder(on_stand_in(queue()), dataset(), device=True)


# ---- the producer's logic, with the device stood in for ------------------------------------------


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
    assert stats["gather"] == "device" and stats["samples"] == 36 and stats["elements"] == 10
    assert HostDeviceArrays.made[0].released  # the device copy is given back when the run ends


def feed_host(q, arrays, **args):
    with tq.Feeder(q, arrays, **args) as feeder:
        got = drain(q, timeout=30)
    return got, feeder


def test_small_batches_are_gathered_in_runs(on_stand_in):
    x, i = dataset(18)
    feed(on_stand_in(queue()), (x, i), shuffle=True, epochs=2)
    assert HostDeviceArrays.made[0].gathers == [18, 18]  # one gather per epoch's run of batches


def test_resume_mid_epoch_loses_and_repeats_nothing(on_stand_in):
    x, i = dataset(18)
    q = on_stand_in(queue(capacity=2))
    taken = []
    with tq.Feeder(q, (x, i), shuffle=True, seed=5, epochs=2, close_when_done=False) as feeder:
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
    import io

    out = io.StringIO()
    x, i = dataset(18)
    got, feeder = feed(on_stand_in(queue()), (x, i), shuffle=True, epochs=2, progress={"file": out, "interval": 0.01})
    assert len(got) == feeder.planned_elements == 10
    assert "10/10" in out.getvalue() and "%s: " % feeder.queue.name in out.getvalue()  # the line, the verdict


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
