"""The README's examples run, and print what the README says; the epoch idioms it documents hold."""

import doctest
import os

import numpy as np

import theano_queue as tq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_readmes_examples_print_what_it_shows():
    failed, attempted = doctest.testfile(
        os.path.join(ROOT, "README.rst"),
        module_relative=False,
        optionflags=doctest.ELLIPSIS,
        verbose=False,
        report=True,
    )
    assert attempted >= 4, "the README's example was not found"
    assert failed == 0, "the README's example does not match the package (doctest's report above)"


def orders(queue, feeder):
    """Each element's ids, in the order taken, over what the feeder produces."""
    taken = []
    with feeder:
        while True:
            try:
                taken.append(queue.get()[0][:, 0].astype(int).tolist())
            except tq.QueueClosed:
                break
    queue.reopen()
    return taken


def test_the_two_epoch_idioms_shuffle_every_epoch_anew():
    """README and tutorial: one Feeder with epochs=N, or a Feeder per epoch with seed=epoch."""
    ids = np.arange(16, dtype="float32")[:, None]
    q = tq.Queue([("id", "float32", (16, 1))], target="cpu")
    first, second = orders(q, tq.Feeder(q, (ids,), shuffle=True, seed=3, epochs=2))
    assert sorted(first) == sorted(second) == list(range(16)) and first != second
    per_epoch = [orders(q, tq.Feeder(q, (ids,), shuffle=True, seed=epoch)) for epoch in range(3)]
    assert all(sorted(order[0]) == list(range(16)) for order in per_epoch)
    assert len({tuple(order[0]) for order in per_epoch}) == 3
    # The pitfall both idioms avoid: the same seed, the same permutation.
    same_seed = [orders(q, tq.Feeder(q, (ids,), shuffle=True, seed=3)) for _ in range(2)]
    assert same_seed[0] == same_seed[1]
