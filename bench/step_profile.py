"""Where the time of a small training step goes when a queue feeds it (issue 10, small steps).

    python -m bench.step_profile                                  # 256x784 and 64x3072, hidden 1024
    python -m bench.step_profile --shapes 256x784 --hidden 64     # a small step on a small CPU
    python -m bench.step_profile --json out.json                  # the figures, for bench/run.py too
    python -m bench.step_profile --dequeue --shapes 500x784       # the dequeue's host time: lending vs copying
    python -m bench.step_profile --copy-thread-turns 1            # array and iterable with one copy thread too
    python -m bench.step_profile --floor                          # and what the step pays with no queue at all
    python -m bench.step_profile --shapes 256x784,500x784:16      # 500x784 with a hidden width of its own

One 3-layer MLP training step (float32, loss read back every step), measured
side by side in interleaved rounds (the best of the rounds is reported: the
machine's noise only ever adds time, while what a producer costs the step
comes back in every round; and, as ``x resident, paired``, the median over
the rounds of each part's ratio to the resident step of the same round,
with the distance between their quartiles as ``spread``: a machine whose
speed moves between rounds moves both steps of a round together):

(a) resident      the batch in shared variables: the step without any input
(b) given         theano.function given a numpy batch each call (cycling
                  through 64 batches, more than a processor's cache)
(c) prefilled     dequeued from a queue filled beforehand, no producer
                  running: the dequeue's own cost (wait, events, copy)
(d) array         an array-dataset Feeder producing meanwhile (native
                  gather, no Python per batch)
(d) held          the same, held in GPU memory (``device=True``: gathered
                  there; on a GPU only)
(e) iterable      a Feeder over a Python list of numpy batches
(e) at other ``sys.setswitchinterval`` values (``--switch-intervals``)
(f) array and iterable again with the engine's copy pool at other sizes
    (``--copy-thread-turns 1``), taking turns with the pool as it is: what
    waking the pool for each batch costs the step beside it
(g) the floors (``--floor``, bench/step_floor.py): the resident step with a
    dequeue's driver calls made before it by its own thread (a record; a
    query and a record; a wait and a record; those after the batch's
    upload; those with the dataset's next batch copied on the host beside
    the step into the staging the uploads read, as an array dataset's
    producer does, by a C thread; and by a Python thread, as a Python
    iterable's Feeder does, GIL included), and with its batch
    sliced in the graph out of the whole dataset held in a shared variable:
    what the fed parts are held against

and, for (c) to (e), the engine's timestamps (``Queue.trace``) of the last
round, as medians per element: the consumer's wait for input and its read,
the producer's wait for room, its write, and its *gap*: the time from one
element's publish to the next put's start, which is the producer's Python
(and its wait for the GIL) between two batches.  ``producer us/batch``
times the producers alone, into a queue with room for everything, with no
consumer: what each costs per batch when nothing competes with it.

Runs wherever Theano runs: on a GPU (``device=cuda``) the queue lives on it;
with ``device=cpu`` the queue is a host queue.
"""

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np
import theano

import theano_queue as tq  # noqa: E402
from bench import step_floor  # noqa: E402
from bench.common import busy_wait, mlp_train_step, reading, time_steps  # noqa: E402
from theano_queue import _engine  # noqa: E402

PARTS = ("resident", "given", "prefilled", "array", "held", "iterable")


def parse_shape(text):
    rows, cols = text.lower().split("x")
    return int(rows), int(cols)


class Case:
    """One step shape: its data, its compiled functions and its queues."""

    def __init__(self, batch, cols, hidden, capacity, prefill, rng):
        self.batch, self.cols, self.hidden, self.prefill = batch, cols, hidden, prefill
        n = max(64 * batch, 4096)
        self.data = rng.standard_normal((n, cols)).astype("float32")
        self.labels = rng.integers(0, 10, n).astype("int32")
        self.batches = [
            (self.data[i * batch : (i + 1) * batch], self.labels[i * batch : (i + 1) * batch]) for i in range(16)
        ]
        spec = [("x", "float32", (batch, cols)), ("y", "int32", (batch,))]
        self.queue = tq.Queue(spec, capacity=capacity, name="fed")
        self.full = tq.Queue(spec, capacity=prefill, name="prefilled")
        rx, ry = theano.shared(self.data[:batch]), theano.shared(self.labels[:batch])
        self.resident = reading(self.compile([], rx, ry))
        gx, gy = theano.tensor.fmatrix("x"), theano.tensor.ivector("y")
        given = self.compile([gx, gy], gx, gy)
        # Every batch of the data in turn, more than a processor's cache holds: like the fed parts,
        # each step reads new memory.
        everything = [(self.data[i : i + batch], self.labels[i : i + batch]) for i in range(0, n - batch + 1, batch)]
        turn = iter(range(1 << 62))
        self.given = reading(lambda: given(*everything[next(turn) % len(everything)]))
        self.fed = reading(self.compile([], *self.queue.dequeue()))
        self.fed_full = reading(self.compile([], *self.full.dequeue()))
        self.calls = None  # the floors' driver calls (add_floors)

    def compile(self, inputs, x, y, extra_updates=()):
        # The same weights' initialisation for every variant: the same work.
        loss, updates = mlp_train_step(x, y, self.cols, self.hidden, 10, np.random.default_rng(1))
        return theano.function(inputs, loss, updates=updates + list(extra_updates))

    def add_floors(self):
        """The steps of bench/step_floor.py's floors: the driver calls' (on a GPU) and the sliced one's."""
        x, y, updates = step_floor.sliced_batch(self.data, self.labels, self.batch)
        self.sliced = reading(self.compile([], x, y, updates))
        if self.queue.on_gpu:
            self.calls = step_floor.DriverCalls(
                [a.nbytes for a in self.batches[0]], dataset=self.data, batches=self.batches
            )

    @property
    def label(self):
        return "%dx%d" % (self.batch, self.cols)

    # ---- feeders ----------------------------------------------------------------

    def feeder(self, part, queue=None):
        """The Feeder of part "array" (the data as an array dataset), "held" (the same held in GPU memory:
        device=True) or "iterable" (a list of batches)."""
        queue = queue or self.queue
        if part in ("array", "held"):
            return tq.Feeder(
                queue,
                (self.data, self.labels),
                epochs=None,
                drop_last=True,
                close_when_done=False,
                device=part == "held",
            )
        return tq.Feeder(queue, self.batches, epochs=None, close_when_done=False)

    def drain(self):
        """Drops what a feeder left, so that the next part starts empty."""
        self.queue.close(cancel_pending=True)
        self.queue.reopen()


# ---- one measurement of each part ---------------------------------------------------------


def measure(case, part, steps):
    """Seconds per step of ``part``."""
    if part == "resident":
        return time_steps(case.resident, steps)
    if part == "given":
        return time_steps(case.given, steps)
    if part == "prefilled":
        return prefilled(case, steps)
    if part == step_floor.SLICED:
        return time_steps(case.sliced, steps)
    if part in step_floor.CALL_FLOORS:
        if case.calls is None:
            return float("nan")  # driver calls: on a GPU only
        return time_steps(step_floor.with_calls(case.resident, case.calls, step_floor.CALL_FLOORS[part]), steps)
    if part == "held" and not case.queue.on_gpu:
        return float("nan")  # device=True holds the arrays in GPU memory: a host queue has none
    with case.feeder(part):
        seconds = time_steps(case.fed, steps)
    case.drain()
    return seconds


def prefilled(case, steps):
    """Steps whose elements were all put before the timing starts, in runs of the big queue's capacity."""
    total, done = 0.0, 0
    while done < steps:
        run = min(case.prefill - 3, steps - done)
        for i in range(run + 3):
            case.full.put(case.batches[i % len(case.batches)])
        busy_wait(case.resident, 0.05)  # the copies have landed: the steps wait for none of them
        total += run * time_steps(case.fed_full, run, warmup=3)
        done += run
    return total / steps


def traced(queue, step, n):
    """The engine's timestamps of n elements while step() runs (a feeder must be producing)."""
    with queue.trace(steps=n) as t:
        for _ in range(n + queue.capacity + 2):
            step()
    return [e["ns"] for e in t.elements]


def prefilled_trace(case, n):
    """The consumer's timestamps with every element put beforehand."""
    n = min(n, case.prefill)
    t = case.full.trace(steps=n).start()
    for i in range(n):
        case.full.put(case.batches[i % len(case.batches)])
    time.sleep(0.05)
    for _ in range(n):
        case.fed_full()
    elements = [e["ns"] for e in t.stop()]
    return elements


# ---- what the timestamps say ---------------------------------------------------------------


def span_us(elements, start, end):
    values = [(e[end] - e[start]) / 1e3 for e in elements if start in e and end in e]
    return statistics.median(values) if values else None


def gap_us(elements, end, start):
    """Median time from ``end`` of element k to ``start`` of element k + 1."""
    values = [(b[start] - a[end]) / 1e3 for a, b in zip(elements, elements[1:]) if end in a and start in b]
    return statistics.median(values) if values else None


def breakdown(elements):
    """Medians (us) of what the engine saw per element."""
    if not elements:
        return {}
    parts = {
        "consumer wait us": span_us(elements, "get_begin", "dequeued"),
        "consumer read us": span_us(elements, "dequeued", "consumed"),
        "step period us": gap_us(elements, "dequeued", "dequeued"),
        "producer wait us": span_us(elements, "put_begin", "reserved"),
        "producer write us": span_us(elements, "reserved", "put_end"),
        "producer publish us": span_us(elements, "put_end", "ready"),
        "producer gap us": gap_us(elements, "ready", "put_begin"),
    }
    return {k: v for k, v in parts.items() if v is not None}


# ---- the producers alone --------------------------------------------------------------------


def producer_cost_us(case, count):
    """Per batch: each feeder filling a queue with room for all, no consumer, nothing else running.

    The second of two fills is timed: the first touches the staging's fresh pages.
    """
    spec = [(c.name, c.dtype, c.shape) for c in case.queue.components]
    out = {}
    for kind in ("array", "iterable"):
        q = tq.Queue(spec, capacity=count, name="producer")
        for timed in (False, True):
            feeder = case.feeder(kind, q)
            began = time.perf_counter()
            with feeder:
                while q.size() < count and feeder.running:
                    time.sleep(0.0002)
                elapsed = time.perf_counter() - began
            q.close(cancel_pending=True)
            q.reopen()
        out[kind] = 1e6 * elapsed / count
        del q
    return out


# ---- the whole profile ------------------------------------------------------------------------


def variant_name(part, interval, threads):
    if interval is not None:
        return "%s, switch interval %g ms" % (part, 1e3 * interval)
    if threads is not None:
        return "%s, %d copy thread%s" % (part, threads, "" if threads == 1 else "s")
    return part


def interleaved_rounds(case, variants, steps, rounds, trace, log):
    """Each variant's seconds per step, one list per variant (a value a round, the variants taking turns),
    and the engine's timestamps of the fed parts in the last round."""
    default_interval = sys.getswitchinterval()
    default_threads = _engine.copy_threads()
    times = {v: [] for v in variants}
    traces = {}
    for r in range(rounds):
        last = r == rounds - 1
        for variant in variants:
            part, interval, threads = variant
            sys.setswitchinterval(interval or default_interval)
            if threads:  # setting the pool drops it, to be made again: only for the turns that change it
                _engine.set_copy_threads(threads)
            try:
                seconds = measure(case, part, steps)
                if last and trace and variant == (part, None, None) and part in ("array", "held", "iterable"):
                    if seconds == seconds:
                        with case.feeder(part):
                            traces[part] = traced(case.queue, case.fed, trace)
                        case.drain()
            finally:
                sys.setswitchinterval(default_interval)
                if threads:
                    _engine.set_copy_threads(default_threads)
            times[variant].append(seconds)
        if log:
            log(
                "  round %d/%d: %s"
                % (
                    r + 1,
                    rounds,
                    ", ".join("%s %.1f" % (variant_name(*v), 1e6 * times[v][-1]) for v in variants),
                )
            )
    return times, traces


def profile(
    batch,
    cols,
    hidden=1024,
    steps=300,
    rounds=5,
    capacity=3,
    switch_intervals=(0.0005,),
    trace=100,
    seed=0,
    log=None,
    copy_thread_turns=(),
    floor=False,
):
    """The profile of one step shape, as a dict: ``rows`` (one per part) and the case's parameters.

    Each variant is (part, switch interval, copy threads), None for as the process has it."""
    case = Case(batch, cols, hidden, capacity, max(steps, trace) + 3, np.random.default_rng(seed))
    floors = (*step_floor.CALL_FLOORS, step_floor.SLICED) if floor else ()
    if floor:
        case.add_floors()
    variants = (
        [(part, None, None) for part in PARTS]
        + [("iterable", s, None) for s in switch_intervals]
        + [(part, None, n) for n in copy_thread_turns for part in ("array", "iterable")]
        + [(part, None, None) for part in floors]
    )
    try:
        times, traces = interleaved_rounds(case, variants, steps, rounds, trace, log)
        if trace:
            traces["prefilled"] = prefilled_trace(case, trace)
    finally:
        if case.calls is not None:
            case.calls.close()
    resident_rounds = times[("resident", None, None)]
    resident = min(resident_rounds)
    rows = []
    for variant in variants:
        seconds = min(times[variant])
        paired = [t / r for t, r in zip(times[variant], resident_rounds)]
        row = {
            "part": variant_name(*variant),
            "us/step": 1e6 * seconds,
            "x resident": seconds / resident,
            "median us": 1e6 * statistics.median(times[variant]),
            "x resident, paired": statistics.median(paired),
            "spread": quartile_distance(paired),
        }
        if variant[1:] == (None, None):
            row.update(breakdown(traces.get(variant[0])))
        rows.append(row)
    producers = producer_cost_us(case, min(200, max(20, steps)))
    return {
        "shape": case.label,
        "hidden": hidden,
        "steps": steps,
        "rounds": rounds,
        "capacity": capacity,
        "device": theano.config.device,
        "target": case.queue.target,
        "rows": rows,
        "producer us/batch": producers,
        "ratios": {p: next(r["x resident"] for r in rows if r["part"] == p) for p in PARTS[1:]},
    }


#: The table's columns that are ratios (three decimals) rather than microseconds.
RATIO_KEYS = ("x resident", "x resident, paired", "spread")


def quartile_distance(values):
    """The distance between the quartiles of values: how far the rounds' ratios spread (0 for one round)."""
    if len(values) < 2:
        return 0.0
    first, _, third = statistics.quantiles(values, n=4, method="inclusive")
    return third - first


def table(result):
    """The profile as aligned text."""
    keys = [
        "part",
        "us/step",
        "x resident",
        "median us",
        "x resident, paired",
        "spread",
        "consumer wait us",
        "consumer read us",
        "producer wait us",
        "producer write us",
        "producer publish us",
        "producer gap us",
    ]
    keys = [k for k in keys if any(k in r for r in result["rows"])]
    lines = [
        "%s, hidden %d, %s (queue target %s), %d steps x %d rounds; producers alone: %s"
        % (
            result["shape"],
            result["hidden"],
            result["device"],
            result["target"],
            result["steps"],
            result["rounds"],
            ", ".join("%s %.1f us/batch" % kv for kv in result["producer us/batch"].items()),
        )
    ]
    widths = [max(len(k), 9) for k in keys]
    widths[0] = max(len(r["part"]) for r in result["rows"]) + 1
    lines.append("  ".join(k.rjust(w) if i else k.ljust(w) for i, (k, w) in enumerate(zip(keys, widths))))
    for r in result["rows"]:
        cells = []
        for i, (k, w) in enumerate(zip(keys, widths)):
            v = r.get(k, "")
            text = v if isinstance(v, str) else ("%.3f" % v if k in RATIO_KEYS else "%.1f" % v)
            cells.append(text.ljust(w) if i == 0 else text.rjust(w))
        lines.append("  ".join(cells))
    return "\n".join(lines)


# ---- the dequeue's own host time, lending against copying (issue 28) ------------------------------


def dequeue_host_us(shape, calls=500, rounds=5, run=48):
    """Host microseconds per call of a function that only dequeues (its outputs the batch, never read back),
    from a ring filled beforehand, with the engine lending the slot's block and with it copying the block,
    side by side in interleaved rounds (medians, and the spread: slowest round over fastest)."""
    batch, cols = shape
    spec = [("x", "float32", (batch, cols)), ("y", "int32", (batch,))]
    q = tq.Queue(spec, capacity=run + 3, name="dequeue")
    # The batch itself as the outputs (GPU arrays, nothing read back): the call's host time alone.
    f = theano.function([], [v.transfer(None) for v in q.dequeue()])
    x = np.random.default_rng(0).standard_normal((batch, cols)).astype("float32")
    y = np.arange(batch, dtype="int32")
    times = {"lend": [], "copy": []}
    for _ in range(rounds):
        for mode in times:
            was = _engine.set_device_lending(mode == "lend")
            try:
                total, done = 0.0, 0
                while done < calls:
                    n = min(run, calls - done)
                    for _ in range(n + 3):
                        q.put(x, y)
                    time.sleep(0.02)  # the copies have landed: the calls wait for nothing
                    total += n * time_steps(f, n, warmup=3)
                    done += n
                times[mode].append(1e6 * total / calls)
            finally:
                _engine.set_device_lending(was)
    stats = q.stats()
    return {
        "shape": "%dx%d" % shape,
        **{"%s us" % m: statistics.median(v) for m, v in times.items()},
        **{"%s spread" % m: max(v) / min(v) for m, v in times.items()},
        "lent": stats["lent"],
        "dequeued": stats["dequeued"],
    }


def held_feeder_us(shape, count=200, samples=50000):
    """Per batch of a dataset held in GPU memory (``device=True``): the Feeder filling a queue with room for
    all, no consumer (wall time and its thread's processor time), against the array dataset gathered on the
    host."""
    batch, cols = shape
    rng = np.random.default_rng(0)
    data = rng.standard_normal((max(samples, 2 * batch), cols)).astype("float32")
    labels = rng.integers(0, 10, len(data)).astype("int32")
    spec = [("x", "float32", (batch, cols)), ("y", "int32", (batch,))]
    out = {"shape": "%dx%d" % shape}
    for device in (True, False):
        q = tq.Queue(spec, capacity=count, name="producer")
        for timed in (False, True):
            feeder = tq.Feeder(
                q, (data, labels), shuffle=True, epochs=None, drop_last=True, close_when_done=False, device=device
            )
            with feeder:
                # From the first batch on: the held dataset's copy to the device (at the start) is not per batch.
                while q.size() < 1 and feeder.running:
                    time.sleep(0.0001)
                began, first, cpu = time.perf_counter(), q.size(), feeder.stats().get("thread_cpu_s", 0.0)
                while q.size() < count and feeder.running:
                    time.sleep(0.0002)
                elapsed = (time.perf_counter() - began) / max(1, q.size() - first)
                cpu = (feeder.stats().get("thread_cpu_s", float("nan")) - cpu) / max(1, q.size() - first)
            q.close(cancel_pending=True)
            q.reopen()
        kind = "held" if device else "array"
        out["%s us/batch" % kind] = 1e6 * elapsed
        out["%s thread cpu us/batch" % kind] = 1e6 * cpu
        del q
    return out


def dequeue_main(args):
    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    result = {
        "dequeue": [dequeue_host_us(s, rounds=args.rounds) for s in shapes],
        "feeder": [held_feeder_us(s) for s in shapes],
    }
    for row in result["dequeue"] + result["feeder"]:
        print("  ".join("%s %s" % (k, "%.2f" % v if isinstance(v, float) else v) for k, v in row.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.node(), **result}, f, indent=1)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dequeue",
        action="store_true",
        help="only the dequeue's host time per call (lending against copying) and a held Feeder's per batch",
    )
    parser.add_argument(
        "--shapes",
        default="256x784,64x3072",
        help="batch x features, comma-separated; BxF:H gives that shape its own hidden width",
    )
    parser.add_argument("--hidden", type=int, default=1024, help="the MLP's hidden width")
    parser.add_argument("--steps", type=int, default=300, help="steps per part and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--capacity", type=int, default=3, help="the fed queue's capacity")
    parser.add_argument(
        "--switch-intervals",
        default="0.5",
        help="extra sys.setswitchinterval values (ms) for the iterable part, comma-separated",
    )
    parser.add_argument("--trace", type=int, default=100, help="elements traced per fed part (0: none)")
    parser.add_argument("--copy-threads", type=int, help="the engine's copy pool (default: one per core, 16 at most)")
    parser.add_argument(
        "--copy-thread-turns",
        default="",
        help="copy pool sizes, comma-separated, at which array and iterable run again, taking turns with the others",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also the resident step with a dequeue's driver calls, with the upload's, and sliced in the graph",
    )
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    if args.dequeue:
        return dequeue_main(args)
    if args.copy_threads:
        _engine.set_copy_threads(args.copy_threads)
    results = []
    for text in args.shapes.split(","):
        shape, _, hidden = text.partition(":")
        batch, cols = parse_shape(shape)
        print("profiling %dx%d ..." % (batch, cols), file=sys.stderr, flush=True)
        result = profile(
            batch,
            cols,
            int(hidden or args.hidden),
            args.steps,
            args.rounds,
            args.capacity,
            tuple(float(s) / 1e3 for s in args.switch_intervals.split(",") if s),
            args.trace,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            copy_thread_turns=tuple(int(n) for n in args.copy_thread_turns.split(",") if n),
            floor=args.floor,
        )
        print(table(result), flush=True)
        print(flush=True)
        results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.node(), "profiles": results}, f, indent=1)
    return results


if __name__ == "__main__":
    main()
