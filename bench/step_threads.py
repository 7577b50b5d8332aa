"""Is a fed small step slower because the training thread works more, or because it waits?

    python -m bench.step_threads [--shape 256x784] [--rounds 3]

The same MLP step as bench/step_profile.py (resident, prefilled, fed by an
array dataset, fed by a Python iterable), and for each, per step: the wall
time, the training thread's CPU time (``time.thread_time``), and how often
it blocked (voluntary context switches, ``getrusage(RUSAGE_THREAD)``) or was
preempted (involuntary ones).  CPU time that grows with the wall time means
the thread worked (or spun) more; blocks mean it slept on a lock, the GIL or
the driver.  Best of the rounds.  doc/bench/notes.rst ("Small steps") has
what it showed on the H200.
"""

import argparse
import resource
import time

import numpy as np

from bench import step_profile  # noqa: E402

PARTS = ("resident", "prefilled", "array", "iterable")


def per_step(step, steps, warmup=3):
    """(wall us, thread CPU us, blocks, preemptions) per step of step()."""
    for _ in range(warmup):
        step()
    before = resource.getrusage(resource.RUSAGE_THREAD)
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    after = resource.getrusage(resource.RUSAGE_THREAD)
    return (
        1e6 * wall / steps,
        1e6 * cpu / steps,
        (after.ru_nvcsw - before.ru_nvcsw) / steps,
        (after.ru_nivcsw - before.ru_nivcsw) / steps,
    )


def measure(case, part, steps):
    if part == "resident":
        return per_step(case.resident, steps)
    if part == "prefilled":
        for i in range(steps + 3):
            case.full.put(case.batches[i % len(case.batches)])
        time.sleep(0.05)  # the copies have landed
        return per_step(case.fed_full, steps)
    with case.feeder(part):
        figures = per_step(case.fed, steps)
    case.drain()
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="256x784")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rows, cols = step_profile.parse_shape(args.shape)
    case = step_profile.Case(rows, cols, args.hidden, 3, args.steps + 3, np.random.default_rng(0))
    best = {}
    for _ in range(args.rounds):
        for part in PARTS:
            figures = measure(case, part, args.steps)
            if part not in best or figures[0] < best[part][0]:
                best[part] = figures
    resident = best["resident"][0]
    print("step %s, hidden %d, best of %d rounds of %d steps" % (args.shape, args.hidden, args.rounds, args.steps))
    for part in PARTS:
        wall, cpu, blocks, preempted = best[part]
        print(
            "  %-10s wall %6.1f us (%.3f x resident)  thread CPU %6.1f us  blocks %.2f  preempted %.2f per step"
            % (part, wall, wall / resident, cpu, blocks, preempted)
        )


if __name__ == "__main__":
    main()
