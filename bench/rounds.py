"""Rounds taken in turn, and what a reader is shown of them: median, spread, ratio (bench/ab.py, bench/run.py).

numpy-free and Theano-free: the A/B harness's parent process and its tests import it without either.
"""

import statistics
import time


def rotated(names, r):
    """The names in round ``r``'s order: each round starts one further on, so no way always runs first (after a
    pause, the first run meets a machine whose clocks have dropped)."""
    names = list(names)
    k = r % len(names) if names else 0
    return names[k:] + names[:k]


def interleave(ways, rounds):
    """{name: [seconds of each round]}: every way of ``ways`` ({name: callable returning seconds}) once per
    round, in rotated order."""
    times = {name: [] for name in ways}
    for r in range(rounds):
        for name in rotated(ways, r):
            times[name].append(ways[name]())
    return times


def per_call(step, calls, blocks=3, warmup=3):
    """Seconds per call of step(): the median of ``blocks`` blocks of ``calls`` calls, after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    seconds = []
    for _ in range(blocks):
        began = time.perf_counter()
        for _ in range(calls):
            step()
        seconds.append((time.perf_counter() - began) / calls)
    return statistics.median(seconds)


def quartiles(values):
    """(first, third) quartile of the values: the inclusive method, so that 3 rounds have an IQR too."""
    values = sorted(values)
    if len(values) == 1:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def summary(values):
    """Median, min, max, quartiles and the spread (max / min) of one way's rounds."""
    q1, q3 = quartiles(values)
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "q1": q1,
        "q3": q3,
        "spread": max(values) / min(values) if min(values) > 0 else float("inf"),
        "rounds": len(values),
    }


def verdict(ratios, tolerance):
    """ "slower" or "faster" when every ratio (new / old: of the medians, of the minimums, paired) says so
    beyond ``tolerance`` (0.02: the issue's 1.02 x), else "": one disturbed round moves one of them, rarely all."""
    if all(r > 1 + tolerance for r in ratios):
        return "slower"
    if all(r < 1 - tolerance for r in ratios):
        return "faster"
    return ""


def compare(old, new, tolerance=0.02, pairs=()):
    """The A/B row of one measure: each side's summary, new / old of the medians and of the minimums, the
    median of the rounds' own new / old (``pairs``: (old, new) measured in one round, one turn after the
    other: the machine's slow drift cancels), and the verdict (none under 3 rounds a side).  Values are per
    round, larger is slower."""
    a, b = summary(old), summary(new)
    ratio = b["median"] / a["median"]
    of_mins = b["min"] / a["min"]
    paired = statistics.median(n / o for o, n in pairs) if pairs else None
    ratios = [ratio, of_mins] + ([paired] if paired is not None else [])
    enough = min(len(old), len(new)) >= 3  # of one or two rounds, a median is one disturbed turn away
    return {
        "old": a,
        "new": b,
        "ratio": ratio,
        "ratio of mins": of_mins,
        "paired": paired,
        "verdict": verdict(ratios, tolerance) if enough else "",
    }
