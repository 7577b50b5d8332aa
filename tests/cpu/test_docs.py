"""The README's examples run, and print what the README says; the epoch idioms it documents hold."""

import doctest
import importlib.util
import json
import os
import re

import numpy as np
import pytest

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


# ---- the docs in two layers (issue 41.5): guides say what to do, the benchmarks page holds what was measured ----

# The pages a user reads to learn what to do (doc/pymc.rst's measurement history is in doc/bench/notes.rst).
GUIDES = [
    "README.rst",
    "doc/index.rst",
    "doc/tutorial.rst",
    "doc/keras.rst",
    "doc/pytensor.rst",
    "doc/pymc.rst",
    "doc/api.rst",
]
USER_PAGES = GUIDES + ["doc/design.rst"]
# A commit's abbreviated or full hash: 7 to 40 hex digits, with a digit and a letter among them.
COMMIT = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/-])")
# A figure as measurements are written: a number with a time, a rate or a ratio ("9.0 us", "55 GB/s", "1.3 to
# 1.7 x", "6x"; not a shape such as "500 x 256").
FIGURE = re.compile(
    r"(?<![\w.|-])\d+(?:\.\d+)?(?:\s*(?:-|to)\s*\d+(?:\.\d+)?)?\s*(?:us|µs|ms|GB/s|MB/s|samples/s|x(?!\s*\d)|×)(?![\w/])"
)
# Figures a guide may write by hand: the package's own constants, not measurements.
CONSTANTS = {"50 ms": "a blocked dequeue's wake-up period, for Ctrl-C (tutorial, Ctrl-C)"}
# Blocks whose text is code or a program's output, not the page's claims.
LITERAL_DIRECTIVES = ("code-block", "code", "testcode", "testoutput", "doctest", "literalinclude", "image", "option")


def read(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def results():
    with open(os.path.join(ROOT, "doc", "bench", "results.json")) as f:
        return json.load(f)


def bench_report():
    spec = importlib.util.spec_from_file_location("bench_report", os.path.join(ROOT, "bench", "report.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prose(text):
    """``(line number, line)`` of a page's own words: no code, program output or inline literal."""
    skip_deeper_than = None
    for number, line in enumerate(text.splitlines(), 1):
        indent = len(line) - len(line.lstrip())
        if skip_deeper_than is not None:
            if not line.strip() or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        directive = re.match(r"\s*\.\. ([\w-]+)::", line)
        if directive and directive.group(1) in LITERAL_DIRECTIVES:
            skip_deeper_than = indent
            continue
        if line.rstrip().endswith("::") and not re.match(r"\s*\.\. ", line):
            skip_deeper_than = indent  # a literal block follows
        if re.match(r"\s*(>>>|\.\.\.) |\.\. \|\w+\| replace::", line):
            continue  # doctest lines, and the definitions of quoted figures (README.rst's, checked below)
        yield number, re.sub(r"``.*?``", "``", line)


@pytest.mark.parametrize("page", USER_PAGES)
def test_user_pages_hold_no_commit_hashes(page):
    found = [(n, line) for n, line in enumerate(read(page).splitlines(), 1) if COMMIT.search(line)]
    assert not found, "%s cites commits (their history belongs in doc/bench/notes.rst): %s" % (page, found)


@pytest.mark.parametrize("page", GUIDES)
def test_guides_quote_figures_by_name_not_by_hand(page):
    """A figure typed into a guide goes stale: guides quote the benchmarks' run by name (|name|)."""
    typed = [
        "%s:%d: %s" % (page, n, figure.group(0))
        for n, line in prose(read(page))
        for figure in FIGURE.finditer(line)
        if figure.group(0) not in CONSTANTS
    ]
    assert not typed, "figures typed by hand (quote them as |name| from bench/report.py's QUOTED): %s" % typed


def test_every_figure_the_guides_quote_is_one_the_benchmarks_page_renders():
    report = bench_report()
    rendered = report.quoted(results())
    quoting = [re.sub(r"^\.\. \|\w+\| replace::.*$", "", read(page), flags=re.M) for page in GUIDES]
    used = {name for text in quoting for name in re.findall(r"\|(\w+)\|", text)}
    assert used, "no guide quotes a figure"
    assert used == set(rendered), "quoted but not rendered from results.json: %s; rendered but quoted nowhere: %s" % (
        sorted(used - set(rendered)),
        sorted(set(rendered) - used),
    )
    # Sphinx takes the definitions from conf.py (rendered when the docs build); README.rst keeps its own copy.
    readme = read("README.rst")
    assert readme == report.readme_with_figures(readme, results()), (
        "README.rst's figures are not results.json's: python bench/report.py doc/bench/results.json rewrites them"
    )
    defined = dict(re.findall(r"^\.\. \|(\w+)\| replace:: (.*)$", readme, flags=re.M))
    assert defined == rendered
    # The contradiction the issue found: one host time per GPU dequeue, the benchmarks page's.
    headline = next(s["headline"] for s in results()["scenarios"] if s["number"] == 5)
    assert rendered["gpu_dequeue_us"] in headline and "|gpu_dequeue_us|" in readme


def test_the_benchmarks_page_is_rendered_from_the_results(monkeypatch):
    """doc/benchmarks.rst (the figures, the quoted table, the notes pasted at its end) is the report of results.json."""
    report = bench_report()
    monkeypatch.setattr(report, "chart", lambda run, path: os.path.exists(path))  # the picture is not redrawn
    assert read("doc/benchmarks.rst") == report.render(results()), (
        "doc/benchmarks.rst is stale: python bench/report.py doc/bench/results.json"
    )


def test_the_readme_is_valid_restructuredtext():
    """GitHub and package indexes render it with docutils: every figure it quotes must be defined there."""
    import io

    from docutils import nodes
    from docutils.core import publish_doctree

    warnings = io.StringIO()
    tree = publish_doctree(read("README.rst"), settings_overrides={"report_level": 2, "warning_stream": warnings})
    assert not list(tree.findall(nodes.system_message)) and not warnings.getvalue(), warnings.getvalue()


def test_index_names_every_audience_first_and_lists_the_guides_before_design_and_benchmarks():
    index = read("doc/index.rst")
    opening = index.split(".. code-block::")[0]
    for audience in ("Theano", "PyTensor", "PyMC", "Keras"):
        assert audience in opening, audience
    pages = re.findall(r"^   (\w+)$", index, flags=re.M)
    assert pages[:5] == ["tutorial", "pytensor", "pymc", "keras", "api"] and pages[5:] == ["design", "benchmarks"]


def test_the_report_rewrites_the_readmes_figures_from_the_record_alone(tmp_path, monkeypatch):
    """bench/run.py --out other.json --only 9 renders its own page; the README keeps quoting the record."""
    report = bench_report()
    doc = tmp_path / "doc"
    (doc / "bench").mkdir(parents=True)
    monkeypatch.setattr(report, "DOC", str(doc))
    monkeypatch.setattr(report, "RECORD", str(doc / "bench" / "results.json"))
    monkeypatch.setattr(report, "chart", lambda run, path: False)
    (tmp_path / "README.rst").write_text("A page quoting |cpu_dequeue_us|.\n")
    partial = {key: value for key, value in results().items() if key != "merged"}
    partial["scenarios"] = [s for s in partial["scenarios"] if s["number"] == 9]
    (tmp_path / "other.json").write_text(json.dumps(partial))
    report.main([str(tmp_path / "other.json")])
    assert (tmp_path / "README.rst").read_text() == "A page quoting |cpu_dequeue_us|.\n"
    assert "(not measured)" in (doc / "benchmarks.rst").read_text()  # what the partial run did not measure
    (doc / "bench" / "results.json").write_text(json.dumps(partial))
    report.main([str(doc / "bench" / "results.json")])
    readme = (tmp_path / "README.rst").read_text()
    assert readme.startswith("A page quoting |cpu_dequeue_us|.\n\n.. The figures quoted above")
    assert ".. |cpu_dequeue_us| replace:: %s\n" % report.quoted(partial)["cpu_dequeue_us"] in readme
