"""Feed theano_queue queues from a Ray Data dataset: one stream per rank.

    pip install 'theano_queue[ray]'
    python examples/ray_feed.py --world 2 --rows 4096

When the data comes from a distributed engine, a queue needs nothing special:
any iterable of batches is a Feeder's source.  Ray Data's
``Dataset.streaming_split(world, equal=True)`` hands each rank a DataIterator
over a disjoint part of one streaming execution of the dataset, and
``iter_batches(batch_format="numpy")`` turns it into dicts of numpy arrays,
which is what a Feeder puts into a queue once the dict's keys are the queue's
component names.

In a real job every rank is a process of its own (a Ray Train worker, or a
task or actor that the iterator is passed to) that trains on its own GPU.  Here
the ranks are threads of one process on a local Ray runtime, each training its
own copy of a small softmax classifier, so the example runs anywhere.  The
split's iterators must be read at the same time: one rank that stops reading
stalls the others.
"""

import argparse
import threading

import numpy as np
import theano
import theano.tensor as T

import theano_queue as tq

N_IN, N_OUT = 16, 4


def make_dataset(rows):
    """A Ray dataset of `rows` examples: features x (float32) and labels y (int32), and each row's id."""
    import ray.data

    weights = np.random.default_rng(0).standard_normal((N_IN, N_OUT)).astype("float32")

    def features(batch):
        ids = batch["id"]
        x = np.sin(np.outer(ids, np.arange(1, N_IN + 1)) * 0.01).astype("float32")
        return {"id": ids.astype("int64"), "x": x, "y": np.argmax(x @ weights, axis=1).astype("int32")}

    return ray.data.range(rows).map_batches(features, batch_format="numpy")


def rank_batches(split, batch_size):
    """One epoch of a rank's batches as the Feeder's source: dicts keyed by component name.

    The last batch may be shorter; the queue takes it as a partial batch.
    """
    for batch in split.iter_batches(batch_size=batch_size, batch_format="numpy", drop_last=False):
        yield {"x": batch["x"], "y": batch["y"], "id": batch["id"]}


def rank_queue(rank, batch_size):
    return tq.Queue(
        [("x", "float32", (batch_size, N_IN)), ("y", "int32", (batch_size,)), ("id", "int64", (batch_size,))],
        capacity=3,
        name="rank%d" % rank,
    )


def build_rank(rank, batch_size):
    """A rank's queue and its training step, whose input is the queue's dequeue."""
    q = rank_queue(rank, batch_size)
    x, y, ids = q.dequeue()
    w = theano.shared(np.zeros((N_IN, N_OUT), "float32"))
    b = theano.shared(np.zeros(N_OUT, "float32"))
    p = T.nnet.softmax(T.dot(x, w) + b)
    loss = T.nnet.categorical_crossentropy(p, y).mean()
    updates = [(v, v - np.float32(0.5) * g) for v, g in zip([w, b], T.grad(loss, [w, b]))]
    return q, theano.function([], [loss, T.eq(T.argmax(p, axis=1), y).sum(), ids], updates=updates)


def train_rank(rank, q, step, split, batch_size, epochs, seen, stop):
    """A rank's training loop: every epoch, a Feeder puts the rank's split into its queue."""
    for epoch in range(epochs):  # each pass over a split is a new execution of the dataset
        if stop.is_set():
            return
        right = total = 0
        with tq.Feeder(q, rank_batches(split, batch_size), stop_timeout=2.0):
            while True:
                try:
                    _, correct, batch_ids = step()
                except tq.QueueClosed:
                    break
                right += int(correct)
                total += len(batch_ids)
                seen[rank].extend(batch_ids.tolist())
        if stop.is_set():
            return
        q.reopen()
        print("rank %d epoch %d: %d rows, train accuracy %.3f" % (rank, epoch, total, right / max(total, 1)))


def run(world, rows, batch_size, epochs=1):
    """Split the dataset `world` ways and train every rank; returns the row ids each rank saw."""
    # Compiled here, one after the other: Theano's compiler is not thread-safe.
    ranks = [build_rank(rank, batch_size) for rank in range(world)]
    splits = make_dataset(rows).streaming_split(world, equal=True)
    seen = {rank: [] for rank in range(world)}
    errors, stop = [], threading.Event()

    def rank_main(rank):
        q, step = ranks[rank]
        try:
            train_rank(rank, q, step, splits[rank], batch_size, epochs, seen, stop)
        except BaseException as exc:
            # The other ranks would wait for this one at the split's next epoch: stop them all.
            errors.append(exc)
            stop.set()
            for other, _ in ranks:
                other.close(cancel_pending=True)

    threads = [threading.Thread(target=rank_main, args=(rank,), name="rank%d" % rank) for rank in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return seen


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", type=int, default=2, help="ranks")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray runtime")
    args = parser.parse_args(argv)

    import ray

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        seen = run(args.world, args.rows, args.batch_size, args.epochs)
    finally:
        ray.shutdown()
    per_epoch = {rank: len(ids) // args.epochs for rank, ids in seen.items()}
    print("rows per rank and epoch: %s (of %d)" % (per_epoch, args.rows))
    return seen


if __name__ == "__main__":
    main()
