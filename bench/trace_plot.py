"""Draw a trace written by Queue.trace as a picture of its timeline, one row per stage.

    python -m bench.trace_plot trace.json picture.png

The picture shows what chrome://tracing or Perfetto shows of the same file:
the stages of each element (wait for room, write, copy to device, in queue,
wait for input, read) as bars on a common clock, so that the overlap of one
batch's copy with the step that reads the one before is visible.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = ["#bbbbbb", "#4477aa", "#ee6677", "#ccbb44", "#aa3377", "#228833"]


def main(path, picture):
    with open(path) as f:
        trace = json.load(f)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    rows = {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] >= 100
    }
    order = sorted(rows)
    start = min(e["ts"] for e in spans)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(order) + 1.4))
    for row, tid in enumerate(order):
        for e in (s for s in spans if s["tid"] == tid):
            colour = COLOURS[(tid // 100 - 1) % len(COLOURS)]
            ax.broken_barh(
                [((e["ts"] - start) / 1e3, e["dur"] / 1e3)],
                (row - 0.4, 0.8),
                color=colour,
                edgecolor="white",
                linewidth=0.5,
            )
            if e["dur"] / 1e3 > 0.08 * max(s["dur"] for s in spans) / 1e3:
                ax.text(
                    (e["ts"] - start + e["dur"] / 2) / 1e3,
                    row,
                    "#%d" % e["args"]["element"],
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
    ax.set_yticks(range(len(order)), [rows[t] for t in order])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    info = trace["otherData"]
    ax.set_title(
        "queue %r on %s: %d elements traced" % (info["queue"], info["target"], len(info["elements"])), fontsize=10
    )
    fig.tight_layout()
    fig.savefig(picture, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
