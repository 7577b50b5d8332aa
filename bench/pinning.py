"""Does placing the producer's threads away from the training thread's CPU give the small step back?

    python -m bench.pinning [--shape 256x784] [--hidden 1024]

A hypothesis from scenario 19 (doc/bench/notes.rst, "Small steps"): a queue's
producer is woken by the step's own dequeue, and the scheduler may run it
beside the training thread (on its core, or its hyperthread sibling), where
its gather and copy slow the step; threads that wake on their own timers
(bench/interference.py) cost the step 3 % at most.  Interleaved rounds, best
of the rounds: the resident step, and the array-dataset and Python-iterable
feeders, with every thread free to run anywhere, and with the training
thread on CPU 0 and every other thread (feeder, copy pool) on the upper half
of the CPUs.
"""

import argparse
import os
import threading

import numpy as np

from bench import step_profile  # noqa: E402
from bench.common import time_steps  # noqa: E402

ALL = sorted(os.sched_getaffinity(0))
UPPER = set(ALL[len(ALL) // 2 :])
_run = threading.Thread.run


def pinned_run(self):
    os.sched_setaffinity(0, UPPER)  # this thread, and the threads it starts
    _run(self)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="256x784")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rows, cols = step_profile.parse_shape(args.shape)
    case = step_profile.Case(rows, cols, args.hidden, 3, 8, np.random.default_rng(0))
    best = {}
    for _ in range(args.rounds):
        for placement in ("anywhere", "pinned"):
            if placement == "pinned":
                os.sched_setaffinity(0, {ALL[0]})
                threading.Thread.run = pinned_run
            for part in ("resident", "array", "iterable"):
                seconds = (
                    time_steps(case.resident, args.steps)
                    if part == "resident"
                    else step_profile.measure(case, part, args.steps)
                )
                key = (placement, part)
                best[key] = min(best.get(key, seconds), seconds)
            os.sched_setaffinity(0, set(ALL))
            threading.Thread.run = _run
    print(
        "step %s, hidden %d, %d CPUs; training thread on CPU %d, the others on %d-%d when pinned"
        % (args.shape, args.hidden, len(ALL), ALL[0], min(UPPER), max(UPPER))
    )
    for placement in ("anywhere", "pinned"):
        resident = best[(placement, "resident")]
        print(
            "  %-8s resident %.1f us; array %.3f x, iterable %.3f x"
            % (
                placement,
                1e6 * resident,
                best[(placement, "array")] / resident,
                best[(placement, "iterable")] / resident,
            )
        )


if __name__ == "__main__":
    main()
