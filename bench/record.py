"""The results file of bench/run.py: one run's record written (and its page rendered), a later run's
scenarios merged into it, or several runs of one machine joined into one record."""

import json
import os


def merged(path, run):
    """The results in path with this run's scenarios in place of theirs (and added), in scenario order."""
    with open(path) as f:
        old = json.load(f)
    fresh = {s["number"]: s for s in run["scenarios"]}
    kept = [s for s in old["scenarios"] if s["number"] not in fresh]
    old["scenarios"] = sorted(kept + list(fresh.values()), key=lambda s: float(s["number"]))
    old.setdefault("merged", []).append(
        {"command": run["command"], "date": run["date"], "machine": run["machine"], "scenarios": sorted(fresh)}
    )
    return old


def joined(paths):
    """One record of the runs in ``paths``, each a part measured on the same machine (``bench/run.py --only N
    --out PART``, with ``--merge`` or not): every scenario once, a later part's in place of an earlier part's,
    in scenario order, and every command that measured them, one a line.  A GPU machine lent for minutes at a
    call measures the record over several calls; a part from another machine, device or copy thread count is
    refused, since its figures were not measured beside the others."""
    first_path, first = None, None
    commands, dates, scenarios = [], [], {}
    for path in paths:
        with open(path) as f:
            part = json.load(f)
        if first is None:
            first_path, first = path, part
        runs = [part] + part.get("merged", [])  # a --merge part: each later process under "merged"
        for key in ("machine", "device", "copy_threads"):
            for other in runs:
                if key in other and other[key] != first[key]:
                    raise ValueError(
                        "bench/run.py --join: %s was measured with %s %r, %s with %r; only the runs of one "
                        "machine join into one record" % (path, key, other[key], first_path, first[key])
                    )
        commands += [r["command"] for r in runs]
        dates += [r["date"] for r in runs]
        scenarios.update((s["number"], s) for s in part["scenarios"])
    span = sorted(set(dates))
    return {
        "machine": first["machine"],
        "device": first["device"],
        "date": span[0] if len(span) == 1 else "%s to %s" % (span[0], span[-1]),
        "command": "\n".join(commands),
        "copy_threads": first["copy_threads"],
        "scenarios": sorted(scenarios.values(), key=lambda s: float(s["number"])),
    }


def write_record(run, out, report=True):
    """Writes ``run`` to ``out`` and, with ``report``, renders the page (doc/benchmarks.rst) from it."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(run, f, indent=1)
    print("wrote", out)
    if report:
        from bench import report as page

        page.main([out])
