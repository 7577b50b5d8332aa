"""Render doc/benchmarks.rst (and the chart doc/_static/benchmarks.png) from a
results file written by bench/run.py, and the figures the README and the
guides quote (:data:`QUOTED`) with it.

    python bench/report.py doc/bench/results.json
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(os.path.dirname(HERE), "doc")
RECORD = os.path.join(DOC, "bench", "results.json")  # the figures of record, which the docs quote

INTRO = """\
Benchmarks
==========

Every figure on this page comes from ``bench/run.py``, which measures each
scenario side by side in its run and reports ratios; the machine it ran on and
the commands are below (one run, or several runs on that machine joined into
one record by ``bench/run.py --join``).  Regenerate with ``make bench`` (on a
machine where Theano runs on the GPU; the GPU scenarios are skipped elsewhere)
and re-render with ``python bench/report.py doc/bench/results.json``.

"""


def _row(scenario, **match):
    """The first row of ``scenario`` whose items are ``match``'s."""
    return next(row for row in scenario["rows"] if all(row.get(k) == v for k, v in match.items()))


def _span(values, form):
    """``low to high`` of ``values`` in ``form``, or one value where they round alike."""
    low, high = form % min(values), form % max(values)
    return low if low == high else "%s to %s" % (low, high)


# The figures the guides quote: a guide writes |name| (Sphinx gets the definitions from conf.py, README.rst
# keeps a copy at its end that main() rewrites and tests/cpu/test_docs.py compares), so that no guide quotes a
# figure this page does not hold, and none goes stale.  (name, scenario, what it is, its text from the scenario)
QUOTED = [
    ("pinned_limit", 1, "pinned host-to-device bandwidth, 256 MiB", lambda s: "%.0f GB/s" % _row(s, MiB=256)["GB/s"]),
    (
        "registered_share",
        2,
        "a registered dataset through the queue, 16 to 256 MiB batches, against that limit",
        lambda s: (
            _span([r["x limit"] for r in s["rows"] if r["source"] == "registered" and r["MiB"] >= 16], "%.3f") + " x"
        ),
    ),
    (
        "balanced_step",
        3,
        "a queue-fed step whose compute and transfer take about as long, against max(compute, transfer)",
        lambda s: "%.2f x" % _row(s, what="theano_queue: both")["x max"],
    ),
    (
        "numpy_step",
        3,
        "the same step as a theano.function given the numpy batches",
        lambda s: "%.1f x" % _row(s, what="theano.function given numpy")["x max"],
    ),
    (
        "gpu_dequeue_us",
        5,
        "host time of a GPU dequeue of a ready batch",
        lambda s: "%.1f us" % _row(s, what="function that dequeues a ready batch")["dequeue overhead us"],
    ),
    (
        "cpu_dequeue_us",
        9,
        "host time of a CPU dequeue of a ready batch",
        lambda s: "%.1f us" % _row(s, what="function that dequeues a ready batch")["dequeue overhead us"],
    ),
    (
        "workers_vs_pytorch",
        11,
        "worker processes' samples/s against PyTorch's DataLoader(pin_memory=True), 1 to 14 workers",
        lambda s: _span([r["ours / PyTorch"] for r in s["rows"] if "ours / PyTorch" in r], "%.1f") + " x",
    ),
    (
        "small_step_array",
        19,
        "a 256x784 MLP step fed by an array dataset, against the step on resident data",
        lambda s: "%.2f x" % s["ratios"]["256x784 array"],
    ),
    (
        "held_gather",
        22,
        "a shuffled gather from a dataset held on the GPU (device=True), against the PCIe limit",
        lambda s: "%.0f x" % next(r["x PCIe"] for r in s["rows"] if "x PCIe" in r),
    ),
    (
        "pymc_c_vs_minibatch",
        30,
        "a queue-fed PyMC 5 ADVI step on the C linker, against pm.Minibatch's (CPU, a user's install)",
        lambda s: "%.2f x" % _row(s, linker="c", feeding="queue")["x Minibatch"],
    ),
    (
        "pymc_numba_vs_minibatch",
        30,
        "the same on the Numba linker",
        lambda s: "%.2f x" % _row(s, linker="numba", feeding="queue")["x Minibatch"],
    ),
]
README_FIGURES = (
    ".. The figures quoted above, from doc/bench/results.json: written by bench/report.py, checked by tests."
)


def quoted(run):
    """``{name: text}`` of every figure the guides may quote, from ``run`` (a results.json); a scenario the run
    did not measure (``--only``, skipped, failed) gives ``(not measured)``."""
    by_number = {s["number"]: s for s in run["scenarios"] if "rows" in s}
    return {
        name: text(by_number[number]) if number in by_number else "(not measured)" for name, number, _, text in QUOTED
    }


def substitutions(run):
    """reStructuredText definitions of the quoted figures: ``.. |name| replace:: text``, one a line."""
    return "".join(".. |%s| replace:: %s\n" % item for item in quoted(run).items())


def quoted_table(run):
    """The quoted figures as this page lists them: name, text, scenario, what."""
    texts = quoted(run)
    rows = [
        {"quoted as": "``|%s|``" % name, "figure": texts[name], "scenario": fmt(number), "what": what}
        for name, number, what, _ in QUOTED
    ]
    return list_table(rows)


def readme_with_figures(readme, run):
    """README.rst's text with its closing definitions of the quoted figures made ``run``'s."""
    head = readme.split(README_FIGURES)[0].rstrip("\n")
    return "%s\n\n%s\n\n%s" % (head, README_FIGURES, substitutions(run))


def fmt(value):
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return "%.3g" % value if abs(value) < 100 else "%.0f" % value
    return str(value)


def cost_with_spread(percents):
    """A cost measured in rounds, as text: its median and the rounds' range, or no cost where noise is all there is.

    A watched step faster than the unwatched one is noise, never a negative cost.
    """
    low, high = min(percents), max(percents)
    middle = sorted(percents)[len(percents) // 2]
    spread = "rounds %+.1f to %+.1f %%" % (low, high)
    if low <= 0 or middle <= 0:
        return "no cost above the noise (%s)" % spread
    return "%+.2f %% (%s)" % (middle, spread)


def list_table(rows, title=None):
    keys = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    lines = [".. list-table::%s" % ((" " + title) if title else ""), "   :header-rows: 1", ""]
    for i, row in enumerate([dict(zip(keys, keys))] + rows):
        for j, key in enumerate(keys):
            cell = fmt(row.get(key, "")) if i else key
            lines.append(("   * - " if j == 0 else "     - ") + (cell or " "))
    return "\n".join(lines) + "\n"


def summary(run):
    rows = []
    for s in run["scenarios"]:
        outcome = s.get("headline") or s.get("skipped") or ("failed: " + s["error"] if "error" in s else "")
        rows.append(
            {
                "#": fmt(s["number"]),
                "scenario": s["title"],
                "result": outcome,
                "target": s.get("target", "(none set)"),
                "met": s["met"] if "met" in s else "n/a",
            }
        )
    return list_table(rows)


def chart(run, path):
    """Two panels: GB/s through the queue against the limit and the peer; the balanced step against baselines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    by_number = {s["number"]: s for s in run["scenarios"]}
    transfer, limit, peer, balanced = (by_number.get(n, {}) for n in (2, 1, 6, 3))
    if "rows" not in transfer or "rows" not in balanced:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    sizes = sorted({r["MiB"] for r in transfer["rows"]})
    width = 0.25
    series = [
        ("numpy batches", [r["GB/s"] for r in transfer["rows"] if r["source"] == "numpy"]),
        ("registered (zero-copy)", [r["GB/s"] for r in transfer["rows"] if r["source"] == "registered"]),
    ]
    if "rows" in peer:
        series.append(("PyTorch DataLoader", [r["PyTorch GB/s"] for r in peer["rows"] if "PyTorch GB/s" in r]))
    for k, (label, values) in enumerate(series):
        left.bar([i + (k - 1) * width for i in range(len(values))], values, width, label=label)
    limits = {r["MiB"]: r["GB/s"] for r in limit.get("rows", []) if "GB/s" in r}
    left.plot(
        range(len(sizes)), [limits.get(m, float("nan")) for m in sizes], "k_--", markersize=30, label="pinned H2D limit"
    )
    left.set_xticks(range(len(sizes)), ["%d MiB" % m for m in sizes])
    left.set_ylabel("GB/s")
    left.set_ylim(0, 75)
    left.set_title("Transfer-bound: bandwidth through the queue")
    left.legend(fontsize=8, loc="upper left", ncol=2)
    labels = [r["what"] for r in balanced["rows"]]
    right.barh(range(len(labels)), [r["ms"] for r in balanced["rows"]], color="tab:blue")
    right.set_yticks(range(len(labels)), labels, fontsize=8)
    right.invert_yaxis()
    right.set_xlabel("ms per step")
    right.set_title("Balanced step, %s float32 batch" % "x".join(map(str, balanced.get("batch", []))))
    fig.suptitle("%s, %s" % (run["machine"], run["date"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def shown_command(command):
    """The command without the benchmark machine's own paths: its interpreter is ``python``, a file its name."""
    words = []
    for word in command.split(" "):
        if word.startswith("/"):
            name = os.path.basename(word)
            word = "python" if name.startswith("python") else name
        words.append(word)
    return " ".join(words)


def render(run):
    parts = [
        INTRO,
        "Measured on %s, %s, Theano device ``%s``, %d host copy threads, with::\n\n   %s\n\n"
        % (
            run["machine"],
            run["date"],
            run["device"],
            run["copy_threads"],
            "\n   ".join(shown_command(c) for c in run["command"].splitlines()),  # a joined record's: one a line
        ),
    ]
    for extra in run.get("merged", []):  # scenarios re-run later (bench/run.py --only N --merge)
        parts.append(
            "Scenario%s %s measured on %s, %s, with::\n\n   %s\n\n"
            % (
                "s" if len(extra["scenarios"]) > 1 else "",
                ", ".join(fmt(n) for n in extra["scenarios"]),
                extra["machine"],
                extra["date"],
                shown_command(extra["command"]),
            )
        )
    chart_path = os.path.join(DOC, "_static", "benchmarks.png")
    if chart(run, chart_path):
        parts.append(
            ".. image:: _static/benchmarks.png\n   :alt: bandwidth through the queue and the balanced "
            "step against the baselines\n\n"
        )
    parts += ["Summary\n-------\n\n", summary(run), "\n"]
    parts += [
        "Figures the guides quote\n------------------------\n\n",
        "The README and the guides quote these figures of the run by name (``|name|``), never by hand:\n\n",
        quoted_table(run),
        "\n",
    ]
    for s in run["scenarios"]:
        title = "%s. %s" % (fmt(s["number"]), s["title"])
        parts.append("%s\n%s\n\n" % (title, "-" * len(title)))
        if "rows" in s:
            parts.append(list_table(s["rows"]) + "\n")
        for key in ("headline", "target", "skipped", "error"):
            if key in s:
                parts.append("%s: %s\n\n" % (key.capitalize(), s[key]))
        for key, value in s.items():
            if key not in ("number", "title", "rows", "headline", "target", "skipped", "error", "met", "seconds"):
                parts.append("%s: ``%s``\n\n" % (key, json.dumps(value)))
    notes = os.path.join(DOC, "bench", "notes.rst")
    if os.path.exists(notes):  # the analysis written after looking at the figures
        with open(notes) as f:
            parts.append(f.read())
    return "".join(parts)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else RECORD
    with open(path) as f:
        run = json.load(f)
    with open(os.path.join(DOC, "benchmarks.rst"), "w") as f:
        f.write(render(run))
    print("wrote", os.path.join(DOC, "benchmarks.rst"))
    if os.path.abspath(path) == RECORD:  # the figures of record: the README quotes them
        readme = os.path.join(os.path.dirname(DOC), "README.rst")
        with open(readme) as f:
            text = readme_with_figures(f.read(), run)
        with open(readme, "w") as f:
            f.write(text)
        print("wrote", readme, "(its figures)")


if __name__ == "__main__":
    main()
