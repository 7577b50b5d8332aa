"""The README's examples run, and print what the README says; the epoch idioms it documents hold."""

import doctest
import os

import numpy as np

import theano_queue as tq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def tutorial_blocks(path):
    """The tutorial's ``testcode`` and ``doctest`` blocks in order: (kind, line, options, code)."""
    lines = open(path).read().splitlines()
    blocks = []
    for i, directive in enumerate(lines):
        if directive.strip() not in (".. testcode::", ".. doctest::"):
            continue
        indent = " " * (len(directive) - len(directive.lstrip()) + 3)
        j, options, body = i + 1, [], []
        while j < len(lines) and lines[j].strip().startswith(":"):
            options.append(lines[j].strip())
            j += 1
        while j < len(lines) and (not lines[j].strip() or lines[j].startswith(indent)):
            body.append(lines[j][len(indent) :])
            j += 1
        blocks.append((directive.strip()[3:-2], i + 1, options, "\n".join(body).strip("\n") + "\n"))
    return blocks


def test_every_tutorial_block_runs_pasted_alone_in_order(capsys):
    """A newcomer pastes the blocks one after another: none may rely on code the page does not show."""
    path = os.path.join(ROOT, "doc", "tutorial.rst")
    blocks = tutorial_blocks(path)
    assert len(blocks) >= 20, "the tutorial's blocks were not found"
    hidden = [line for _, line, options, _ in blocks if ":hide:" in options]
    assert not hidden, "tutorial.rst lines %s: a hidden block does what a reader cannot see" % hidden
    namespace = {"__name__": "__main__"}
    for kind, line, _, code in blocks:
        if kind == "testcode":
            exec(compile(code, "%s:%d" % (path, line), "exec"), namespace)
            continue
        test = doctest.DocTestParser().get_doctest(code, namespace, "tutorial", path, line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, clear_globs=False)
        assert runner.failures == 0, "the doctest block at tutorial.rst:%d (its report above)" % line
