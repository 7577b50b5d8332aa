"""A training step fed by the user's own minibatch generator: Feeder against the plain loop (issue 21, point 1).

    python -m bench.generator_step                       # Theano's device (the GPU where THEANO_FLAGS says so)
    python -m bench.generator_step --cpu --quick         # on the processor, small: a check, not figures
    python -m bench.generator_step --steps-ms 0.2,0.6,2 --json out.json
    python -m bench.generator_step --cpu --elements           # the host cost per element alone, no step

The MNIST example's MLP (batch 500x784 float32, int32 labels) and its
``iterate_minibatches`` generator (a shuffled fancy-indexed slice per batch),
with the MLP's hidden width chosen so that the resident step takes about
0.2, 0.6 and 2 ms.  Per step size, measured side by side in interleaved
rounds (median and best of the rounds):

resident   the batch in shared variables: the step without any input
given      the plain loop: ``for x, y in iterate_minibatches(...): f(x, y)``
fed        a Feeder over the same generator, the step ``f()`` dequeuing
fed-nohand the same with the dequeue's GIL hand-over off (``_engine.set_gil_hand_over``)
prefilled  ``f()`` dequeuing from a ring filled beforehand, no producer
array      an array-dataset Feeder over the same arrays (shuffle=True)
held       the same, the arrays held in GPU memory (``device=True``: gathered there, by the dequeue on the
           step's stream)
held-copy  the same, each batch gathered by the Feeder on the queue's copy stream instead
           (``_engine.set_held_gather_in_step(0)``: how every held batch was gathered before)
generator  the generator alone: ``next()``, no step (its numpy gather holds the GIL throughout)
generator beside
           the fed part's floor, no theano_queue in it: the resident step, each taking a batch (and dropping
           it) from a ``queue.Queue`` of the ring's capacity that a plain thread fills from the generator

and the ratios the issue asks for: fed / given (<= 1: never slower than the
loop it replaces), fed / prefilled (<= 1.05), fed / generator beside (the
fed part over its floor) and each against resident: the
median over rounds of the part's run over a resident run just before it,
with the spread of those ratios (largest over smallest).  The
fed part's ``Feeder.stats()`` says where the Feeder's thread spent its time
(``gil_wait_s``: waiting for the GIL after its puts), and ``Ring.hand_overs`` the
consumer's hand-overs of the GIL to it (``hand_overs_taken``, ``hand_overs_in_vain``).
"""

if __name__ == "__main__" and "--cpu" in __import__("sys").argv:
    import os

    # Before Theano is imported: its device is read once, at import.
    os.environ["THEANO_FLAGS"] = ",".join(f for f in [os.environ.get("THEANO_FLAGS", ""), "device=cpu"] if f)

import argparse  # noqa: E402
import json  # noqa: E402
import queue  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import theano  # noqa: E402
import theano.tensor as T  # noqa: E402

import theano_queue as tq  # noqa: E402
from bench.common import busy_wait, mlp_train_step, reading, time_steps  # noqa: E402
from theano_queue import _engine  # noqa: E402

PARTS = (
    "resident",
    "given",
    "fed",
    "fed-nohand",
    "prefilled",
    "array",
    "held",
    "held-copy",
    "generator",
    "generator beside",
)
#: The parts set against resident: each of their runs follows a resident run of its own.  A small step's
#: own time moves by up to 1.5 x from one run to the next on the H200 (its host side: the launches), and a
#: ratio of two runs far apart measured the machine's drift as much as the part.
PAIRED = ("fed", "prefilled", "array", "held", "held-copy", "generator beside")
#: The ratios bench/run.py's scenario 20 puts in its headline, each at every step size.
HEADLINE = (
    "fed / given",
    "prefilled / resident",
    "held / resident",
    "array / resident",
    "fed / resident",
    "fed / generator beside",
)
BATCH, COLS = 500, 784
WIDTHS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def iterate_minibatches(inputs, targets, batchsize, shuffle=True):
    """The MNIST example's generator, as users have it: a shuffled epoch of fancy-indexed batches."""
    indices = np.arange(len(inputs))
    if shuffle:
        np.random.shuffle(indices)
    for start in range(0, len(inputs) - batchsize + 1, batchsize):
        excerpt = indices[start : start + batchsize] if shuffle else slice(start, start + batchsize)
        yield inputs[excerpt], targets[excerpt]


def forever(inputs, targets, batchsize):
    """Epoch after epoch of the generator: what a loop of a few hundred steps draws from."""
    while True:
        yield from iterate_minibatches(inputs, targets, batchsize)


class Step:
    """One step size: its compiled functions and queues over one dataset."""

    def __init__(self, data, labels, hidden, capacity, prefill):
        self.data, self.labels, self.hidden, self.prefill = data, labels, hidden, prefill
        spec = [("x", "float32", (BATCH, COLS)), ("y", "int32", (BATCH,))]
        self.queue = tq.Queue(spec, capacity=capacity, name="fed")
        self.full = tq.Queue(spec, capacity=prefill, name="prefilled")
        self.resident = reading(self.compile([], theano.shared(data[:BATCH]), theano.shared(labels[:BATCH])))
        gx, gy = T.fmatrix("x"), T.ivector("y")
        given = self.compile([gx, gy], gx, gy)
        self.given_f = lambda x, y: float(np.asarray(given(x, y)))
        self.fed = reading(self.compile([], *self.queue.dequeue()))
        self.fed_full = reading(self.compile([], *self.full.dequeue()))
        self.feeder_stats = {}

    def compile(self, inputs, x, y):
        loss, updates = mlp_train_step(x, y, COLS, self.hidden, 10, np.random.default_rng(1))
        return theano.function(inputs, loss, updates=updates)

    def measure(self, part, steps):
        """Seconds per step of ``part``."""
        if part == "resident":
            return time_steps(self.resident, steps)
        if part == "given":
            batches = forever(self.data, self.labels, BATCH)
            return time_steps(lambda: self.given_f(*next(batches)), steps)
        if part == "prefilled":
            return self.prefilled(steps)
        if part == "generator":
            batches = forever(self.data, self.labels, BATCH)
            return time_steps(lambda: next(batches), steps)
        if part == "generator beside":
            return self.beside_generator(steps)
        if part in ("held", "held-copy") and not self.queue.on_gpu:
            return float("nan")  # device=True holds the arrays in GPU memory: a host queue has none
        if part in ("fed", "fed-nohand"):
            feeder = tq.Feeder(self.queue, forever(self.data, self.labels, BATCH), close_when_done=False)
        else:
            feeder = tq.Feeder(
                self.queue,
                (self.data, self.labels),
                shuffle=True,
                epochs=None,
                drop_last=True,
                close_when_done=False,
                device=part.startswith("held"),
            )
        was = _engine.set_gil_hand_over(part != "fed-nohand")
        in_step = _engine.set_held_gather_in_step(0) if part == "held-copy" else None
        try:
            hand_overs = self.queue._ring.hand_overs()
            with feeder:
                seconds = time_steps(self.fed, steps)
                self.feeder_stats[part] = feeder.stats()
            taken, vain = (now - before for now, before in zip(self.queue._ring.hand_overs(), hand_overs))
            self.feeder_stats[part].update(hand_overs_taken=taken, hand_overs_in_vain=vain)
        finally:
            _engine.set_gil_hand_over(was)
            if in_step is not None:
                _engine.set_held_gather_in_step(in_step)
        self.queue.close(cancel_pending=True)
        self.queue.reopen()
        return seconds

    def beside_generator(self, steps, batches=None):
        """Seconds per resident step, each taking one batch from a ``queue.Queue`` of the ring's capacity that
        a plain thread fills from the generator (``batches``, else the example's): a generator Feeder's floor
        with no theano_queue in it, the GIL that the generator holds and a ring's pacing included."""
        batches = forever(self.data, self.labels, BATCH) if batches is None else batches
        ready, stop = queue.Queue(maxsize=self.queue.capacity), threading.Event()

        def draw():
            for batch in batches:
                while not stop.is_set():
                    try:
                        ready.put(batch, timeout=0.05)  # a timeout: the thread sees stop while the ring is full
                        break
                    except queue.Full:
                        pass
                if stop.is_set():
                    return

        thread = threading.Thread(target=draw, name="generator beside", daemon=True)
        thread.start()

        def step():
            ready.get()
            return self.resident()

        try:
            return time_steps(step, steps)
        finally:
            stop.set()
            thread.join()

    def prefilled(self, steps):
        """Steps whose elements were all put before the timing starts, in runs of the big queue's capacity."""
        total, done = 0.0, 0
        batches = forever(self.data, self.labels, BATCH)
        while done < steps:
            run = min(self.prefill - 3, steps - done)
            for _ in range(run + 3):
                self.full.put(next(batches))
            busy_wait(self.resident, 0.05)  # the copies have landed: the steps wait for none of them
            total += run * time_steps(self.fed_full, run, warmup=3)
            done += run
        return total / steps


def width_for(data, labels, target_s, widths=WIDTHS):
    """The narrowest hidden width whose resident step takes at least ``target_s`` (the widest otherwise)."""
    x, y = theano.shared(data[:BATCH]), theano.shared(labels[:BATCH])
    seconds = None
    for hidden in widths:
        loss, updates = mlp_train_step(x, y, COLS, hidden, 10, np.random.default_rng(1))
        step = reading(theano.function([], loss, updates=updates))
        seconds = min(time_steps(step, max(5, int(0.05 / max(seconds or 1e-4, 1e-5)))) for _ in range(3))
        if seconds >= target_s:
            return hidden, seconds
    return widths[-1], seconds


def profile(target_s, data, labels, steps, rounds, capacity=3, log=None):
    """One step size: a dict with the rows (one per part), the ratios and the fed Feeder's stats."""
    hidden, calibrated = width_for(data, labels, target_s)
    step = Step(data, labels, hidden, capacity, steps + 3)
    times = {part: [] for part in PARTS}
    paired = {part: [] for part in PAIRED}
    for r in range(rounds):
        # Each round starts with another part: the first after a pause runs on a GPU whose clocks have dropped
        # (seen on the H200: 345 MHz when idle), and no part should always be the one that pays for it.
        for part in PARTS[r % len(PARTS) :] + PARTS[: r % len(PARTS)]:
            before = step.measure("resident", steps) if part in PAIRED else None
            times[part].append(step.measure(part, steps))
            if before is not None:
                paired[part].append(times[part][-1] / before)
        if log:
            log(
                "  %.2g ms, hidden %d, round %d/%d: %s"
                % (1e3 * target_s, hidden, r + 1, rounds, ", ".join("%s %.1f" % (p, 1e6 * times[p][-1]) for p in PARTS))
            )
    median = {p: statistics.median(v) for p, v in times.items()}
    best = {p: min(v) for p, v in times.items()}
    ratios = {
        "fed / given": median["fed"] / median["given"],
        "fed-nohand / given": median["fed-nohand"] / median["given"],
        "fed / prefilled": median["fed"] / median["prefilled"],
        # The fed part over its floor, each as the median of its rounds over their own resident runs.
        "fed / generator beside": statistics.median(paired["fed"]) / statistics.median(paired["generator beside"]),
        "given / resident": median["given"] / median["resident"],
        # Against resident: the median of each round's part over the resident run just before it.
        **{"%s / resident" % p: statistics.median(paired[p]) for p in PAIRED},
        **{"%s / resident spread" % p: max(paired[p]) / min(paired[p]) for p in PAIRED},
        **{"%s / resident, unpaired medians" % p: median[p] / median["resident"] for p in PAIRED},
        # The best rounds too: on a shared machine the noise only ever adds time.
        "best fed / given": best["fed"] / best["given"],
        "best fed / prefilled": best["fed"] / best["prefilled"],
        "best fed-nohand / given": best["fed-nohand"] / best["given"],
    }
    fed = step.feeder_stats.get("fed", {})
    return {
        "target ms": 1e3 * target_s,
        "hidden": hidden,
        "calibrated resident us": 1e6 * calibrated,
        "rows": [
            {
                "part": p,
                "median us": 1e6 * median[p],
                "best us": 1e6 * best[p],
                # The spread over rounds: the slowest round over the fastest.
                "spread": max(times[p]) / min(times[p]),
                "x resident": median[p] / median["resident"],
            }
            for p in PARTS
        ],
        "ratios": ratios,
        "fed feeder": {
            k: fed[k]
            for k in (
                "busy",
                "thread_cpu_s",
                "gil_wait_s",
                "gil_waits",
                "gil_wait_share",
                "gil_bound",
                "hand_overs_taken",
                "hand_overs_in_vain",
            )
            if k in fed
        },
        "fed-nohand feeder": {
            k: v for k, v in step.feeder_stats.get("fed-nohand", {}).items() if k.startswith(("gil", "thread"))
        },
    }


def table(results, device):
    lines = ["generator-fed MLP step (%dx%d float32), device %s; medians of interleaved rounds" % (BATCH, COLS, device)]
    lines.append(
        "%-8s %-7s " % ("step", "hidden")
        + " ".join("%11s" % p for p in PARTS)
        + "   fed/given  fed/prefilled  (best rounds)  nohand/given  GIL wait/elt"
    )
    for r in results:
        us = {row["part"]: row["median us"] for row in r["rows"]}
        fed = r["fed feeder"]
        gil = fed.get("gil_wait_s", 0.0) / fed["gil_waits"] * 1e6 if fed.get("gil_waits") else float("nan")
        lines.append(
            "%-8s %-7d " % ("%.1f ms" % r["target ms"], r["hidden"])
            + " ".join("%8.1f us" % us[p] for p in PARTS)
            + "   %9.3f  %13.3f  %6.3f %6.3f  %12.3f  %9.1f us"
            % (
                r["ratios"]["fed / given"],
                r["ratios"]["fed / prefilled"],
                r["ratios"]["best fed / given"],
                r["ratios"]["best fed / prefilled"],
                r["ratios"]["fed-nohand / given"],
                gil,
            )
        )
    return "\n".join(lines)


def run(targets_ms=(0.2, 0.6, 2.0), steps=300, rounds=7, samples=50000, seed=0, log=None):
    """Every step size; the results as a list of :func:`profile` dicts."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((samples, COLS)).astype("float32")
    labels = rng.integers(0, 10, samples).astype("int32")
    np.random.seed(seed)  # the generator shuffles with numpy's global state, as the example does
    return [profile(t / 1e3, data, labels, steps, rounds, log=log) for t in targets_ms]


# ---- the iterable path's host cost per element, without a step ----------------------------------------


def element_costs(shape=(BATCH, COLS), count=200, rounds=7):
    """Microseconds per element on a host queue (medians of rounds): the generator alone, the engine's put in
    a loop, the producer's put (``Queue.put``'s checked door), a Feeder's thread, and a consumer's get."""
    import math

    rng = np.random.default_rng(0)
    data = rng.standard_normal((16 * shape[0],) + tuple(shape[1:])).astype("float32")
    labels = rng.integers(0, 10, 16 * shape[0]).astype("int32")
    spec = [("x", "float32", shape), ("y", "int32", (shape[0],))]
    q = tq.Queue(spec, capacity=count, target="cpu", name="elements")

    def batches():
        for i in range(count):
            j = i % 16
            yield data[j * shape[0] : (j + 1) * shape[0]], labels[j * shape[0] : (j + 1) * shape[0]]

    def drained(fill):
        began = time.perf_counter()
        fill()
        put_s = time.perf_counter() - began
        began = time.perf_counter()
        for _ in range(count):
            q.get()
        return put_s, time.perf_counter() - began

    def feeder():
        f = tq.Feeder(q, batches(), close_when_done=False).start()
        f.join()

    ways = {
        "next(generator)": None,
        "engine put": lambda: [q._ring.put(e, math.inf, None) for e in batches()],
        "producer put": lambda: [q._port.put(e, math.inf, None) for e in batches()],
        "Feeder thread": feeder,
    }
    drained(ways["engine put"])  # the slots' pages touched once
    times = {name: [] for name in ways}
    for _ in range(rounds):
        for name, fill in ways.items():
            if name == "next(generator)":
                began = time.perf_counter()
                sum(1 for _ in batches())
                times[name].append((time.perf_counter() - began, 0.0))
            else:
                times[name].append(drained(fill))
    return {
        name: {
            "put us": 1e6 * statistics.median(t[0] for t in v) / count,
            "get us": 1e6 * statistics.median(t[1] for t in v) / count,
        }
        for name, v in times.items()
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run Theano on the processor (set before its import)")
    parser.add_argument("--quick", action="store_true", help="few steps and rounds: a check, not figures")
    parser.add_argument("--steps-ms", default="0.2,0.6,2", help="resident step sizes to aim for, comma-separated")
    parser.add_argument("--steps", type=int, default=300, help="steps per part and round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--elements", action="store_true", help="only the host cost per element (no step)")
    args = parser.parse_args(argv)
    if args.elements:
        for shape in ((BATCH, COLS), (2, 4)):
            costs = element_costs(shape)
            print(
                "%s: %s"
                % (
                    "x".join(map(str, shape)),
                    ", ".join("%s %.1f us (get %.1f us)" % (k, v["put us"], v["get us"]) for k, v in costs.items()),
                )
            )
        return costs
    steps, rounds, samples = (60, 3, 8000) if args.quick else (args.steps, args.rounds, 50000)
    results = run(
        tuple(float(s) for s in args.steps_ms.split(",")),
        steps,
        rounds,
        samples,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(table(results, theano.config.device))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": theano.config.device, "profiles": results}, f, indent=1)
    return results


if __name__ == "__main__":
    main()
