"""Issue 43.1 and 43.2's floor: what a producer's driver calls cost a small GPU step.

    python -m bench.driver_lock [--steps 400] [--rounds 5] [--launches 40] [--batch 802816] [--json PATH]

The CUDA driver serialises the calls that two threads make in one context
(doc/bench/notes.rst, "Small steps").  This builds ``bench/driver_lock.c``
(gcc) and runs it: a *step* thread that waits for a batch's event, launches
``--launches`` tiny kernels and reads 8 bytes back, as a small training step
does, and a *producer* thread that the step wakes once per step (as a dequeue
wakes a Feeder) and that makes one batch's driver calls of a pattern:

  none          the step alone
  host          a host copy of the batch, no driver call
  record        one cuEventRecord
  query         one cuEventQuery (a call that queues nothing)
  sync          one cuEventSynchronize of an event long complete (a
                producer's wait for its staging once the upload is done)
  upload        wait, cuMemcpyHtoDAsync, record (an array dataset's producer)
  upload2       cuMemcpyHtoDAsync, record (two calls a batch)
  host+upload   host, then upload: an array dataset's producer, its gather
                of the batch's rows into the staging included
  gather        wait, a kernel launch, record (a held dataset's producer)
  graph-upload  one cuGraphLaunch of upload's three nodes
  graph-gather  one cuGraphLaunch of gather's three nodes
  graph-upload+sync  graph-upload, then sync: an issuer's launch and a
                producer's wait, two calls a batch (in one thread here)
  deferred      upload's three calls made by the step's own thread (the
                path the engine takes for small batches today)
  persistent    no driver call a batch: a gather kernel launched once
                (bench/persistent_gather.cu; DRIVER_LOCK_BLOCKS blocks, 32
                by default) takes each batch's row numbers from mapped host
                memory and fills two slots in turn, and the step waits for
                its batch and frees the slot with stream memory operations
                in place of its wait and record (issue 43.2's other
                option); the run fails if the last batch's rows were
                gathered wrong

and, for each producer mode M, M@late: the producer woken after the step's
launches, so that its calls meet the step's thread waiting for the GPU.

Per mode it prints the step's period (median of rounds, and their spread),
its ratio to ``none`` (paired within each round), the step thread's time
inside its launches (the driver lock shows there), the producer's time inside
its calls per batch, and whether the producer kept up.  A pattern whose
step is at ``none``'s needs no change of thread; the gap of the others to it
is the floor a producer of that kind cannot go under.
The driver is libcuda.so.1, or the library ``THEANO_QUEUE_LIBCUDA`` names.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: Each mode's driver calls per batch: (the step thread's, the producer's).
MODES = {
    "none": (0, 0),
    "host": (0, 0),
    "record": (0, 1),
    "query": (0, 1),
    "sync": (0, 1),
    "upload": (0, 3),
    "upload2": (0, 2),
    "host+upload": (0, 3),
    "gather": (0, 3),
    "graph-upload": (0, 1),
    "graph-gather": (0, 1),
    "graph-upload+sync": (0, 2),
    "deferred": (3, 0),
    "persistent": (0, 0),
}
#: The modes a producer thread runs, and so may run late.
PRODUCERS = [mode for mode in MODES if mode not in ("none", "deferred")]
#: What a bare ``--modes`` runs.
DEFAULT_MODES = list(MODES) + ["upload@late", "graph-upload@late", "gather@late"]


def calls_of(mode):
    """(the step thread's, the producer's) driver calls per batch of `mode`, late or not."""
    return MODES[mode.split("@")[0]]


def known(mode):
    name, _, when = mode.partition("@")
    return name in MODES and (not when or (when == "late" and name in PRODUCERS))


MNIST_BATCH = 256 * 784 * 4  # bytes: scenario 19's 256x784 float32 batch


def build(folder):
    """Compiles bench/driver_lock.c into `folder`; the executable's path."""
    executable = os.path.join(folder, "driver_lock")
    subprocess.run(
        [
            "gcc",
            "-std=gnu11",
            "-O2",
            "-Wall",
            "-I" + os.path.join(ROOT, "c_code", "generated"),
            os.path.join(HERE, "driver_lock.c"),
            "-o",
            executable,
            "-ldl",
            "-lpthread",
            "-lm",
        ],
        check=True,
    )
    return executable


def parse(output):
    """The program's lines as {mode: [per-round dicts]}; a mode the driver cannot run maps to its reason."""
    rounds = {}
    for line in output.splitlines():
        mode, _, rest = line.partition(" ")
        _, _, values = rest.partition(" ")
        if values.startswith("n/a "):
            rounds[mode] = values[4:]
            continue
        period, launches, calls, kept_up = values.split()
        rounds.setdefault(mode, []).append(
            {
                "period_us": float(period),
                "launch_us": float(launches),
                "call_us": float(calls),
                "kept_up": kept_up == "1",
            }
        )
    return rounds


def summarise(rounds):
    """Per mode: medians over rounds, the period's spread, and the period and launch time against none's,
    paired round by round."""
    base = rounds.get("none")
    summary = {}
    for mode, runs in rounds.items():
        if isinstance(runs, str):
            summary[mode] = {"unavailable": runs}
            continue
        periods = [r["period_us"] for r in runs]
        row = {
            "period_us": statistics.median(periods),
            "spread": max(periods) / min(periods),
            "launch_us": statistics.median(r["launch_us"] for r in runs),
            "call_us": statistics.median(r["call_us"] for r in runs),
            # Only a producer thread can fall behind; "none" and "deferred" have none.
            "kept_up": all(r["kept_up"] for r in runs) if mode.split("@")[0] in PRODUCERS else None,
            "calls": calls_of(mode),
        }
        if isinstance(base, list) and len(base) == len(runs):
            row["x_none"] = statistics.median(r["period_us"] / b["period_us"] for r, b in zip(runs, base))
            row["launch_x_none"] = statistics.median(r["launch_us"] / b["launch_us"] for r, b in zip(runs, base))
        summary[mode] = row
    return summary


def show(summary, launches, batch):
    print("%d launches a step, a %d-byte batch; us, medians of rounds" % (launches, batch))
    print(
        "%-22s %-14s %9s %7s %7s %11s %7s %13s %8s"
        % ("mode", "calls step/prod", "step", "spread", "x none", "launches", "x none", "producer/batch", "kept up")
    )
    for mode, row in summary.items():
        if "unavailable" in row:
            print("%-22s n/a: %s" % (mode, row["unavailable"]))
            continue
        call = "--" if math.isnan(row["call_us"]) else "%.1f" % row["call_us"]
        print(
            "%-22s %-14s %9.1f %7.2f %7s %11.1f %7s %13s %8s"
            % (
                mode,
                "%d / %d" % row["calls"],
                row["period_us"],
                row["spread"],
                "%.3f" % row["x_none"] if "x_none" in row else "--",
                row["launch_us"],
                "%.3f" % row["launch_x_none"] if "launch_x_none" in row else "--",
                call,
                {True: "yes", False: "no", None: "--"}[row["kept_up"]],
            )
        )


def measure(steps, rounds, launches, batch, modes):
    """Builds and runs the probe; its summary."""
    with tempfile.TemporaryDirectory(prefix="driver_lock") as folder:
        done = subprocess.run(
            [build(folder), str(steps), str(rounds), str(launches), str(batch), ",".join(modes)],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        raise RuntimeError("bench/driver_lock.c failed:\n" + done.stderr)
    return summarise(parse(done.stdout))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="timed steps per mode and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--launches", type=int, default=40, help="kernel launches per step")
    parser.add_argument("--batch", type=int, default=MNIST_BATCH, help="bytes per batch")
    parser.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help="comma-separated, from: %s; M@late for a producer mode M" % ", ".join(MODES),
    )
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    unknown = [m for m in modes if not known(m)]
    if unknown:
        parser.error("no mode %s; the modes are %s" % (", ".join(unknown), ", ".join(MODES)))
    summary = measure(args.steps, args.rounds, args.launches, args.batch, modes)
    show(summary, args.launches, args.batch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"launches": args.launches, "batch": args.batch, "modes": summary}, f, indent=1)


if __name__ == "__main__":
    main()
