"""The real paths bench/ab.py measures in each tree's turn: ``run(name, on_gpu, quick)`` gives a scenario's
{"measures": {measure: seconds per unit}}, or {"skipped": why}.

Only the public API of theano_queue is used here: the old tree of an A/B may predate any private name.
"""

import statistics
import time

import numpy as np
import theano

import theano_queue as tq
from bench import lasagne_mlp
from bench.common import mlp_train_step, reading
from bench.pipelines import Augment
from bench.rounds import per_call


def lasagne(on_gpu, quick):
    """Lasagne's MNIST MLP: the example's own loop and givens (controls), and the queue's ways."""
    # Blocks of about 0.1 s (quick) and 0.3 s on the H200's 0.4 ms step; a processor takes 50 ms or more.
    n, calls = (10000, 200) if quick else (30000, 600)
    if not on_gpu:
        calls = 5 if quick else 15
    data, labels = lasagne_mlp.digits(n)
    ways = lasagne_mlp.Ways(data, labels, calls).ways
    return {name: way() for name, way in ways.items()}


def small(on_gpu, quick):
    """A 500x784 step of hidden 16 (issue 43's 0.31 ms row): resident (control), and the queue's ways."""
    batch, cols = lasagne_mlp.BATCH, lasagne_mlp.COLS
    calls = (300 if quick else 1000) if on_gpu else (100 if quick else 400)
    data, labels = lasagne_mlp.digits(10000)

    def compiled(x, y):
        loss, updates = mlp_train_step(x, y, cols, 16, 10, np.random.default_rng(1))
        return reading(theano.function([], loss, updates=updates))

    resident = compiled(theano.shared(data[:batch]), theano.shared(labels[:batch].astype("int32")))
    q = tq.Queue([("x", "float32", (batch, cols)), ("y", "int32", (batch,))], capacity=3, name="small")
    fed = compiled(*q.dequeue())
    measures = {"resident": per_call(resident, calls)}
    for name, feeder in lasagne_mlp.feeders(q, data, labels).items():
        measures[name] = lasagne_mlp.fed_seconds(q, feeder, fed, calls, 3)
    return measures


def put(on_gpu, quick):
    """``q.put(x, y)`` of 500x784 float32 with uint8 labels, into a uint8 and an int32 component, each element
    taken by a dequeue step reading one value; on a GPU for a host queue too."""
    from bench.arrays_bench import cpu_mode

    data, labels = lasagne_mlp.digits(2000)
    x, y = data[:500].copy(), labels[:500].copy()
    calls = 300 if quick else 1000
    measures = {}
    for target in [None, "cpu"] if on_gpu else [None]:
        where = "host" if target == "cpu" or not on_gpu else "gpu"
        for label in ("uint8", "int32"):
            q = tq.Queue([("x", "float32", x.shape), ("y", label, y.shape)], capacity=4, target=target, name="put")
            taken = q.dequeue()[0][0, 0]
            step = reading(theano.function([], taken, mode=cpu_mode() if target == "cpu" else None))

            def put_and_take(q=q, step=step):
                q.put(x, y)
                step()

            name = "uint8 labels" if label == "uint8" else "uint8 labels into int32"
            measures["%s, %s queue" % (name, where)] = per_call(put_and_take, calls)
    return measures


class _Machine:
    """What bench/workers_bench.py asks of bench/run.py's Bench."""

    def __init__(self, on_gpu):
        self.on_gpu = on_gpu


class GetItemOnly:
    """bench/pipelines.py's Augment samples through ``__getitem__`` alone: a map-style dataset with no
    ``read_into`` attribute.  (Its AugmentCopying sets ``read_into = None``, which the worker processes
    take for a method: theano_queue/feed/child.py asks ``hasattr``.)"""

    shape, dtype = Augment.shape, Augment.dtype

    def __init__(self, n):
        self.augment = Augment(n)

    def __len__(self):
        return len(self.augment)

    def __getitem__(self, i):
        return self.augment[i]


def workers(on_gpu, quick):
    """Map-style ``__getitem__`` workers over Augment, 2 and 8, as bench/workers_bench.py runs them: seconds
    per sample."""
    from bench import pipelines
    from bench.workers_bench import feeder_rate

    batch, seconds = (64, 0.5) if quick else (256, 2.0)
    kept = pipelines.PIPELINES["augment"]
    pipelines.PIPELINES["augment"] = (Augment, GetItemOnly)  # feeder_rate's __getitem__ dataset, in this turn
    try:
        return {
            "%d workers, __getitem__" % w: 1 / feeder_rate(_Machine(on_gpu), "augment", w, batch, seconds, False)[0]
            for w in (2, 8)
        }
    finally:
        pipelines.PIPELINES["augment"] = kept


def keras(on_gpu, quick):
    """Keras 2.3.1's MLP: its own ``fit`` (control) against the queue's array dataset, seconds per step."""
    try:
        from bench import keras_bench
    except ImportError as exc:
        return {"skipped": "Keras does not import here (%s)" % exc}
    rows, batch, hidden = (5000, 250, 256) if quick else (20000, 250, 256)
    rng = np.random.default_rng(0)
    X = rng.random((rows, 784), dtype=np.float32)
    Y = rng.integers(0, 10, rows).astype("int32")
    ways = {
        "fit": keras_bench.numpy_way(X, Y, batch, hidden),
        "queue, array dataset": keras_bench.queue_way(X, Y, batch, hidden, False),
    }
    seconds = {}
    for name, epoch in ways.items():
        epoch()  # compiles, and warms the path
        times = []
        for _ in range(2 if quick else 3):
            began = time.perf_counter()
            epoch()
            times.append(time.perf_counter() - began)
        seconds[name] = statistics.median(times) / (rows // batch)
    return seconds


SCENARIOS = {"lasagne": lasagne, "small": small, "put": put, "workers": workers, "keras": keras}


def run(name, on_gpu, quick):
    measures = SCENARIOS[name](on_gpu, quick)
    if "skipped" in measures:
        return measures
    return {"measures": measures}
