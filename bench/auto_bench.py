"""Issue 44's targets: ``auto`` against the best fixed setting a sweep finds, on three workloads.

    python bench/run.py --only 44 --out /tmp/auto.json --no-report
    python bench/auto_bench.py --workloads decode --seconds 5 --rounds 1 --json decode.json   # one part, sized
    python bench/auto_bench.py --workloads generator --settings capacity=2 --rounds 5        # auto against one

Each workload is a training loop (a fixed model step of busy CPU work after
every dequeue) fed one way:

* ``decode``: a map-style dataset whose samples cost CPU work, with worker
  processes; the sweep is workers ``counts(cores)`` (1-4, then sparser, up to cores) x capacity 2..16.
* ``arrays``: a shuffled in-RAM array dataset (the engine's gather); the
  sweep is the copy pool's threads ``counts(cores)`` x capacity 2..16.
* ``generator``: a Python generator of whole batches in the Feeder's
  thread; the sweep is capacity 2..16.

``auto`` is ``Queue(capacity="auto")`` (which tunes the copy threads too),
with ``workers="auto"`` where the Feeder takes it (else the sweep's most
workers, said in the row).  Every setting runs the same seconds; the best
fixed setting is the one with the most samples/s over the second half of
its run.  Printed as ratios to it: auto's samples/s, the seconds auto took
to reach 0.95x the best's rate (over a trailing second), and the peak
memory (this process's and its workers' resident set, sampled) of each.
The settings take turns round by round; each figure is the median over the
rounds.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    # `python bench/auto_bench.py` runs this module as `python -m bench.auto_bench` does, from the checkout's root.
    import os
    import runpy
    import sys

    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runpy.run_module("bench.auto_bench", run_name="__main__", alter_sys=True)
    sys.exit(0)

import argparse
import json
import os
import statistics
import threading
import time

import numpy as np

import theano_queue as tq
from theano_queue import _engine

ROWS = 16
SAMPLE = (32, 32, 3)
CAPACITIES = (2, 4, 8, 16)


class Decode:
    """Map-style: each sample costs ``ms`` of CPU work (a decoder), then is drawn from its index."""

    def __init__(self, n, ms):
        self.n, self.ms = n, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        end = time.perf_counter() + self.ms / 1e3
        while time.perf_counter() < end:
            pass
        return np.full(SAMPLE, i % 251, "float32"), np.int32(i)


def generator(batches, ms):
    """Whole batches, each costing ``ms`` of numpy work in the Feeder's thread."""
    rng = np.random.default_rng(0)
    for i in range(batches):
        end = time.perf_counter() + ms / 1e3
        x = rng.standard_normal((ROWS,) + SAMPLE).astype("float32")
        while time.perf_counter() < end:
            x += 0.0
        yield x, np.full(ROWS, i, "int32")


def spec(rows=ROWS, sample=SAMPLE):
    return [("x", "float32", (rows,) + sample), ("y", "int32", (rows,))]


def resident_bytes(pids) -> int:
    """VmRSS of this process and ``pids``, from /proc (0 for one that is gone)."""
    total = 0
    for pid in [os.getpid(), *pids]:
        try:
            with open("/proc/%d/status" % pid) as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration, ValueError):
            pass
    return total


def train(q, feeder, seconds, step_ms):
    """Dequeues with a fixed step after each for ``seconds``: (dequeue times, samples per element, peak RSS)."""
    times, rows, peak = [], [], [0]
    done = threading.Event()

    def watch():
        while not done.wait(0.1):
            try:
                pids = feeder.stats().get("pids", [])
            except Exception:
                pids = []
            peak[0] = max(peak[0], resident_bytes(pids))

    watcher = threading.Thread(target=watch, daemon=True)
    started = time.perf_counter()
    with feeder:
        watcher.start()
        while time.perf_counter() - started < seconds:
            try:
                element = q.get()
            except tq.QueueClosed:
                break
            times.append(time.perf_counter() - started)
            rows.append(len(element[1]))
            end = time.perf_counter() + step_ms / 1e3
            while time.perf_counter() < end:
                pass
    done.set()
    watcher.join()
    q.close()
    return times, rows, peak[0]


def rates(times, rows, seconds):
    """(samples/s over the run's second half, a function t -> samples/s over the trailing second)."""
    half = [r for t, r in zip(times, rows) if t >= seconds / 2]
    steady = sum(half) / (seconds / 2)

    def trailing(t):
        return sum(r for u, r in zip(times, rows) if t - 1.0 < u <= t)

    return steady, trailing


def time_to_reach(times, rows, level, seconds):
    """The first time (0.1 s steps) at which the trailing second's samples/s is >= level; None if never."""
    _, trailing = rates(times, rows, seconds)
    t = 1.0
    while t <= seconds:
        if trailing(t) >= level:
            return t
        t += 0.1
    return None


def feeder_workers_auto_accepted(q, dataset) -> bool:
    """Whether this build's Feeder takes ``workers="auto"`` (helper work in progress may not be merged)."""
    try:
        tq.Feeder(q, dataset, workers="auto")
    except (TypeError, ValueError):
        return False
    return True


def counts(cores):
    """The worker (or copy thread) counts a sweep tries: every count up to 4, then every other, then every
    fourth, and ``cores`` itself, so that a 16-core sweep takes minutes and still brackets the best count."""
    ladder = [1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64]
    return sorted({c for c in ladder if c <= cores} | {cores})


def setting_runs(workload, cores, quick):
    """(label, make) per setting of ``workload``: make() -> (queue, feeder, note)."""
    ms_decode, ms_gen = 1.0, 4.0
    n = 1 << 20
    if workload == "decode":
        fixed = [
            ("workers=%d capacity=%d" % (w, c), dict(workers=w, capacity=c)) for w in counts(cores) for c in CAPACITIES
        ]
    elif workload == "arrays":
        fixed = [
            ("threads=%d capacity=%d" % (t, c), dict(threads=t, capacity=c)) for t in counts(cores) for c in CAPACITIES
        ]
    else:
        fixed = [("capacity=%d" % c, dict(capacity=c)) for c in CAPACITIES]
    if quick:
        fixed = fixed[:: max(1, len(fixed) // 3)]
    arrays = None
    if workload == "arrays":
        arrays = (np.random.default_rng(0).standard_normal((8192,) + SAMPLE).astype("float32"),)
        arrays += (np.arange(8192, dtype="int32"),)

    def make(setting):
        capacity = setting["capacity"]
        q = tq.Queue(spec(), capacity=capacity, target="cpu", name="bench44")
        if workload == "decode":
            dataset = Decode(n, ms_decode)
            workers, note = setting.get("workers"), ""
            if workers == "auto" and not feeder_workers_auto_accepted(q, dataset):
                workers, note = cores, 'workers="auto" not in this build: workers=%d' % cores
            return q, tq.Feeder(q, dataset, workers=workers, epochs=None), note
        if workload == "arrays":
            if setting.get("threads"):
                _engine.set_copy_threads(setting["threads"])
            return q, tq.Feeder(q, arrays, shuffle=True, epochs=None), ""
        return q, tq.Feeder(q, generator(n, ms_gen)), ""

    auto = dict(capacity="auto", workers="auto") if workload == "decode" else dict(capacity="auto")
    if workload == "arrays":
        auto["threads"] = 1  # auto starts from one copy thread and tunes them
    return fixed, ("auto", auto), make


def workload_rows(workload, seconds, auto_seconds, rounds, step_ms, quick, settings=None):
    """(the workload's row, the sweep's median samples/s by setting); ``settings``: only these fixed labels."""
    cores = os.cpu_count() or 1
    fixed, (auto_label, auto_setting), make = setting_runs(workload, cores, quick)
    if settings:
        fixed = [(label, setting) for label, setting in fixed if label in settings]
        if not fixed:
            raise SystemExit("auto_bench: none of the settings %r is in the %s sweep" % (settings, workload))
    default_threads = _engine.copy_threads()
    runs = {label: [] for label, _ in fixed + [(auto_label, auto_setting)]}
    notes = {}
    try:
        for _ in range(rounds):
            for label, setting in fixed + [(auto_label, auto_setting)]:  # the settings take turns, round by round
                length = auto_seconds if label == auto_label else seconds
                q, feeder, note = make(setting)
                times, rows, peak = train(q, feeder, length, step_ms)
                steady, _ = rates(times, rows, length)
                runs[label].append({"times": times, "rows": rows, "peak": peak, "steady": steady, "len": length})
                if label == auto_label:
                    notes[label] = note or ""
                    auto_log = q.port.auto.as_dict() if q.port.auto is not None else {}
                    notes["auto decided"] = auto_log.get("last_change") or "no change"
                    notes["auto ended at"] = ", ".join(
                        "%s %s" % (k, v) for k, v in sorted(auto_log.items()) if k not in ("history", "last_change")
                    )
                _engine.set_copy_threads(default_threads)
    finally:
        _engine.set_copy_threads(default_threads)
    median = {label: statistics.median(r["steady"] for r in rs) for label, rs in runs.items()}
    best = max((label for label, _ in fixed), key=median.get)
    reach = []
    for r in runs[auto_label]:
        reach.append(time_to_reach(r["times"], r["rows"], 0.95 * median[best], r["len"]))
    reached = [t for t in reach if t is not None]
    peak = {label: statistics.median(r["peak"] for r in rs) for label, rs in runs.items()}
    spread = {
        label: max(r["steady"] for r in rs) / max(min(r["steady"] for r in rs), 1e-9) for label, rs in runs.items()
    }
    return {
        "workload": workload,
        "best fixed": best,
        "best samples/s": median[best],
        "auto samples/s": median[auto_label],
        "auto / best samples/s": median[auto_label] / median[best],
        "auto s to 0.95x best": statistics.median(reached) if len(reached) == len(reach) else None,
        "auto / best peak memory": peak[auto_label] / peak[best],
        "auto spread": spread[auto_label],
        **{k: v for k, v in notes.items() if v},
    }, {label: round(median[label], 1) for label, _ in fixed}


WORKLOADS = ("decode", "arrays", "generator")


def auto_against_sweep(b, workloads=WORKLOADS, seconds=None, auto_seconds=None, rounds=None, settings=None):
    """Scenario 44's body: one row per workload."""
    sized = (3.0, 6.0, 1) if b.quick else (6.0, 12.0, 2)
    seconds, auto_seconds, rounds = [given or default for given, default in zip((seconds, auto_seconds, rounds), sized)]
    rows, sweeps = [], {}
    for w in workloads:
        row, sweeps[w] = workload_rows(w, seconds, auto_seconds, rounds, step_ms=2.0, quick=b.quick, settings=settings)
        rows.append(row)
    met = all(
        r["auto / best samples/s"] >= 0.95
        and r["auto s to 0.95x best"] is not None
        and r["auto s to 0.95x best"] <= 10
        and r["auto / best peak memory"] <= 1.1
        for r in rows
    )
    return {
        "rows": rows,
        "sweep samples/s": sweeps,
        "target": "auto >= 0.95x the best fixed setting's samples/s, within 10 s, within 1.1x its peak memory",
        "met": met,
        "headline": "; ".join(
            "%s: auto/best %.2f x, %s s to 0.95x, memory %.2f x"
            % (
                r["workload"],
                r["auto / best samples/s"],
                "%.1f" % r["auto s to 0.95x best"] if r["auto s to 0.95x best"] is not None else "never",
                r["auto / best peak memory"],
            )
            for r in rows
        ),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="Scenario 44 in parts: auto against a sweep, sized for one call.")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of: " + ", ".join(WORKLOADS))
    parser.add_argument("--seconds", type=float, help="each fixed setting's run (default 6)")
    parser.add_argument("--auto-seconds", type=float, help="auto's run (default 12)")
    parser.add_argument("--rounds", type=int, help="rounds, the settings taking turns in each (default 2)")
    parser.add_argument("--settings", help="comma-separated fixed labels to run, e.g. 'workers=2 capacity=4'")
    parser.add_argument("--quick", action="store_true", help="a smoke test: a third of the sweep, short runs")
    parser.add_argument("--json", help="write the result here too")
    args = parser.parse_args(argv)

    class Bench:
        quick = args.quick

    settings = args.settings.split(",") if args.settings else None
    result = auto_against_sweep(
        Bench, args.workloads.split(","), args.seconds, args.auto_seconds, args.rounds, settings=settings
    )
    result["cores"] = os.cpu_count()
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
