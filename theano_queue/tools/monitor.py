"""A live view of a queue while training runs: is the model waiting for its input?

::

    with tq.monitor(q):                       # or tq.Feeder(q, source, progress=True)
        for _ in range(steps):
            train_step()

shows one tqdm line, refreshed from a background thread, and ends with a
verdict::

    train: 1250 el [00:09, model waited 31%, ring full 0%, fill 0.1/4, 137 el/s, 540 MB/s]
    train: input-bound: the model waited 31% of the time; add workers or use read_into

The decisive figures come first, so that a narrow terminal cuts the rates,
never the share of the time the model waited for data.

Every figure comes from ``Queue.stats()`` (and the feeder's ``stats()`` when
it has one), read every ``interval`` seconds by the monitor's own thread: the
training step does no extra work.
"""

import collections
import sys
import threading
import time

from tqdm import tqdm
from tqdm.utils import disp_trim

from ..feed.autotune import summary_of

#: When the model waited at least this share of the time, the input is the bottleneck.
INPUT_BOUND = 0.05
#: When the model waited less than this share of the time, the input is not a limit.
COMPUTE_BOUND = 0.01
#: When an input-bound feeder's thread waited for the GIL more than this share of the time, Python is the limit.
GIL_BOUND = 0.5
#: Producers (workers, the Feeder's thread, the gather) busy at least this share of the time run flat out.
PRODUCERS_BUSY = 0.8
#: A rate at least this share of the bus's limit (``bus_gbps``) is at the limit.
BUS_BOUND = 0.8
#: Producers that waited for a free slot at least this share of the time found the ring full.
RING_FULL = 0.5
#: Spans shorter than this many seconds get no verdict, since one late wake-up of a thread (a few
#: ms on a loaded machine) would swing the share the model waited across the thresholds.
SHORTEST_JUDGED = 0.1

# tqdm's layouts of the line, without and with a known total.  The rate is the
# monitor's own (over the window), so it is in the postfix (:func:`_postfix`).
LINE = "{desc}: {n_fmt} el [{elapsed}{postfix}]"
LINE_WITH_TOTAL = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"
# The same where the bar would leave the figures no room: the percentage says as much.
LINE_WITH_TOTAL_NARROW = "{desc}: {percentage:3.0f}% [{elapsed}<{remaining}{postfix}]"
#: The fewest columns a bar is drawn in; a line with less room for it drops it.
SHORTEST_BAR = 10


class MonitorLine(tqdm):
    """tqdm's line, cut to the terminal's width whatever tqdm's version (4.67 leaves a line without a bar uncut,
    and a narrow terminal wraps it): the decisive figures come first, so the cut takes the rest.  A bar
    yields its room to them: where the figures leave it fewer than :data:`SHORTEST_BAR` columns, it is
    not drawn."""

    @staticmethod
    def format_meter(*args, **kwargs):
        ncols = kwargs.get("ncols")
        if ncols and kwargs.get("bar_format") == LINE_WITH_TOTAL:
            without_bar = tqdm.format_meter(*args, **dict(kwargs, bar_format=LINE_WITH_TOTAL.replace("{bar}", "")))
            if len(without_bar) + SHORTEST_BAR > ncols:
                kwargs = dict(kwargs, bar_format=LINE_WITH_TOTAL_NARROW)
        line = tqdm.format_meter(*args, **kwargs)
        return disp_trim(line, ncols) if ncols else line


Figures = collections.namedtuple(
    "Figures",
    "seconds elements elements_per_s gbps mean_fill capacity model_waited producers_waited workers_busy "
    "feeder_gil_wait workers gather bus_gbps",
    defaults=(None, None, False, None),
)
Figures.__doc__ = """What a monitor measured over a span of time (all shares are of that time).

``seconds`` the span; ``elements`` taken by consumers in it and
``elements_per_s``; ``gbps`` bytes put into the queue per second / 1e9
(``bytes_in``); ``mean_fill`` the time-weighted mean number of elements ready
in the ring, out of ``capacity``; ``model_waited`` the share of the time
consumers waited for an element (``consumer_wait_s``); ``producers_waited``
the share producers waited for a free slot (``producer_wait_s``; summed over
producers, so several can exceed 1; the line's "ring full"); ``workers_busy``
the share of the time the feeder's workers were busy, or None when the feeder
does not say; ``feeder_gil_wait`` the share of the time the feeder's thread
waited to take the GIL back (``gil_wait_s``), or None when it does not say;
``workers`` the feeder's worker processes (0: its own thread produces; None
when no feeder says); ``gather`` True when the producer is an array
dataset's gather (the engine's copy pool does the work, and ``workers_busy``
is the share of the time it gathered); ``bus_gbps`` the bus's limit in GB/s
for this kind of source (``theano-queue probe``), None when not known.
"""


def monitor(queue, feeder=None, **options):
    """A :class:`Monitor` of ``queue`` for a ``with`` block: the line runs while the block does.

    ``feeder`` (optional) is read for worker statistics; ``options`` are
    :class:`Monitor`'s.
    """
    return Monitor(queue, feeder=feeder, **options)


class Monitor:
    """Samples a queue's statistics on a timer and shows them as a tqdm line.

    Parameters
    ----------
    queue : Queue
    feeder : Feeder or None
        When it has a ``stats()`` method (feeders with worker processes do),
        the line also shows how busy its workers are.  The keys read, each
        optional: ``worker_busy_s`` (busy seconds summed over workers) with
        ``workers`` (their number), else ``busy`` or ``worker_busy`` (a share
        of the time, 0 to 1, or a list of shares, one a worker).
    interval : float
        Seconds between samples (and refreshes of the line).
    window : float
        The line shows figures over about the last ``window`` seconds; the
        verdict covers the whole span since :meth:`start`.
    total : int or None
        Elements expected, for a bar with an end and a time left.
    file
        A text file where the line and the verdict go; None for tqdm's
        default, stderr.
    verdict : bool
        Print the one-line verdict when the monitor closes.
    desc : str
        The line's label; the queue's name by default.
    bus_gbps : float or None
        The limit of the bus for this kind of source in GB/s, as
        ``theano-queue probe`` prints it: with it, the verdict says when the
        bus is the bottleneck.
    """

    def __init__(
        self,
        queue,
        feeder=None,
        interval=0.5,
        window=10.0,
        total=None,
        file=None,
        verdict=True,
        desc=None,
        disable=False,
        bus_gbps=None,
    ):
        if interval <= 0:
            raise ValueError("Monitor(%s): interval must be > 0, got %r" % (queue.name, interval))
        self.queue = queue
        self.feeder = feeder
        self.interval = float(interval)
        self.window = float(window)
        self.total = total
        self.file = file
        self.print_verdict = verdict
        self.desc = desc if desc is not None else queue.name
        self.disable = disable
        self.bus_gbps = bus_gbps
        #: The verdict printed when the monitor closed (None before).
        self.last_verdict = None
        #: Samples taken, and the seconds they took in all (the monitor's whole cost to the process).
        self.samples, self.sample_seconds = 0, 0.0
        self._first = None
        self._recent = collections.deque()
        self._bar = None
        self._thread = None
        self._stop = threading.Event()
        self._closed = False
        self._auto_close = False
        self._lock = threading.Lock()
        self._sampled_fill = []  # only where the engine does not integrate the fill itself

    def __repr__(self):
        return "<Monitor of queue %r, %s>" % (self.queue.name, "running" if self.running else "stopped")

    @classmethod
    def for_feeder(cls, feeder, progress):
        """The monitor of ``Feeder(..., progress=...)``: True, or a dict of Monitor options."""
        options = dict(progress) if isinstance(progress, dict) else {}
        if options.get("total") is None:
            options["total"] = feeder.planned_elements
        monitor = cls(feeder.queue, feeder=feeder, **options)
        monitor._auto_close = True
        return monitor

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    # ---- sampling ------------------------------------------------------------------

    def _snapshot(self):
        stats = dict(self.queue.stats())
        stats.setdefault("clock_s", time.monotonic())
        if "fill_integral" not in stats:
            self._sampled_fill.append(stats.get("size", 0))
        stats["feeder"] = self._feeder_stats()
        auto = (stats["feeder"] or {}).get("auto") or _queue_auto(self.queue)
        if auto is not None:
            stats["auto"] = auto
        return stats

    def _feeder_stats(self):
        read = getattr(self.feeder, "stats", None)
        if not callable(read):
            return None
        try:
            stats = read()
        except Exception:  # a feeder's statistics are a bonus; never let them break the line
            return None
        return stats if isinstance(stats, dict) else None

    def _figures(self, a, b):
        seconds = max(b["clock_s"] - a["clock_s"], 1e-9)
        elements = b["dequeued"] - a["dequeued"]
        if "fill_integral" in a and "fill_integral" in b:
            mean_fill = (b["fill_integral"] - a["fill_integral"]) / seconds
        else:
            mean_fill = sum(self._sampled_fill) / len(self._sampled_fill) if self._sampled_fill else float(b["size"])
        return Figures(
            seconds=seconds,
            elements=elements,
            elements_per_s=elements / seconds,
            gbps=(b["bytes_in"] - a["bytes_in"]) / seconds / 1e9,
            mean_fill=mean_fill,
            capacity=b["capacity"],
            model_waited=(b["consumer_wait_s"] - a["consumer_wait_s"]) / seconds,
            producers_waited=(b["producer_wait_s"] - a["producer_wait_s"]) / seconds,
            workers_busy=_workers_busy(a["feeder"], b["feeder"], seconds),
            feeder_gil_wait=_feeder_gil_wait(a["feeder"], b["feeder"], seconds),
            workers=_workers(b["feeder"]),
            gather=bool(b["feeder"] and b["feeder"].get("gather")),
            bus_gbps=self.bus_gbps,
        )

    def figures(self):
        """:class:`~theano_queue.tools.monitor.Figures` since :meth:`start`, measured now."""
        if self._first is None:
            raise RuntimeError("Monitor(%s): not started" % self.queue.name)
        return self._figures(self._first, self._snapshot())

    # ---- the line ------------------------------------------------------------------------

    def start(self):
        """Take the first sample, open the line and start the sampling thread."""
        if self._thread is not None:
            raise RuntimeError("Monitor(%s): already started" % self.queue.name)
        self._first = self._snapshot()
        self._recent.append(self._first)
        layout = LINE if self.total is None else LINE_WITH_TOTAL
        self._bar = MonitorLine(
            total=self.total,
            desc=self.desc,
            file=self.file,
            dynamic_ncols=True,
            mininterval=0,
            bar_format=layout,
            disable=self.disable,
        )
        self._thread = threading.Thread(target=self._run, name="Monitor(%s)" % self.queue.name, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            self._refresh()
            if self._epoch_over():
                self.close()
                return

    def _epoch_over(self):
        """A feeder's monitor ends by itself once the feeder is done and its queue is drained."""
        return self._auto_close and not getattr(self.feeder, "running", True) and self.queue.size() == 0

    def _refresh(self):
        started = time.perf_counter()
        with self._lock:
            if self._bar is None:
                return
            now = self._snapshot()
            while len(self._recent) > 1 and now["clock_s"] - self._recent[1]["clock_s"] >= self.window:
                self._recent.popleft()
            recent = self._figures(self._recent[0], now)
            self._recent.append(now)
            line = _postfix(recent)
            if "auto" in now:  # what the tuners decided, last: a narrow terminal cuts it before the figures
                line += ", " + summary_of(now["auto"])
            self._bar.set_postfix_str(line, refresh=False)
            self._bar.n = now["dequeued"] - self._first["dequeued"]
            self._bar.refresh()
            self.samples += 1
            self.sample_seconds += time.perf_counter() - started

    def close(self):
        """Stop sampling, close the line and print the verdict (once)."""
        if self._first is None:  # never started
            return
        with self._lock:
            first_call, self._closed = not self._closed, True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()  # also waits for a close the thread itself is doing
        if not first_call:
            return
        self._refresh()
        with self._lock:
            self._bar.close()
            self._bar = None
        self.last_verdict = "%s: %s" % (self.desc, verdict(self.figures()))
        if self.print_verdict and not self.disable:
            tqdm.write(self.last_verdict, file=self.file if self.file is not None else sys.stderr)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False


def _workers_busy(a, b, seconds):
    """The feeder's worker busy share between two of its stats() dicts, or None.

    Busy seconds summed over workers (``worker_busy_s`` with ``workers``) give
    the share over the span; else the feeder's own share since it started:
    ``busy``, or ``worker_busy`` as one share or a list of them, one a worker
    (what the feeders of theano_queue report), averaged.
    """
    if not b:
        return None
    if a and "worker_busy_s" in a and "worker_busy_s" in b and b.get("workers"):
        try:
            return (float(b["worker_busy_s"]) - float(a["worker_busy_s"])) / (seconds * int(b["workers"]))
        except (TypeError, ValueError):
            return None
    share = b.get("busy", b.get("worker_busy"))
    if isinstance(share, (list, tuple)):
        share = sum(share) / len(share) if share else None
    try:
        return float(share) if share is not None else None
    except (TypeError, ValueError):
        return None


def _queue_auto(queue):
    """The queue's own AutoLog as a dict (``Queue(capacity="auto")``), or None (a stand-in without a port too)."""
    log = getattr(getattr(queue, "port", None), "auto", None)
    return log.as_dict() if log is not None else None


def _workers(stats):
    """The feeder's worker processes (0: its own thread produces), or None when no feeder says."""
    try:
        return int(stats["workers"])
    except (KeyError, TypeError, ValueError):
        return None


def _feeder_gil_wait(a, b, seconds):
    """The share of the span the feeder's thread waited for the GIL (its stats' ``gil_wait_s``), or None."""
    try:
        return (float(b["gil_wait_s"]) - float(a["gil_wait_s"])) / seconds
    except (KeyError, TypeError, ValueError):
        return None


def _postfix(f):
    """The line's figures, the decisive ones first: a narrow terminal cuts the end."""
    rate = f.elements_per_s
    parts = ["model waited %.0f%%" % (100 * f.model_waited)]
    if f.workers_busy is not None:  # with the model's wait, what decides "add workers"
        parts.append("workers busy %.0f%%" % (100 * f.workers_busy))
    # The share producers waited for a free slot: the ring was full, mostly because the input is ahead.
    parts += ["ring full %.0f%%" % (100 * f.producers_waited), "fill %.1f/%d" % (f.mean_fill, f.capacity)]
    parts += [("%.0f el/s" if rate >= 100 else "%.3g el/s") % rate, bytes_per_second(f.gbps * 1e9)]
    return ", ".join(parts)


def bytes_per_second(rate):
    """``rate`` in the unit that shows it with three figures: ``'350 kB/s'``, ``'1.25 GB/s'``."""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if rate >= scale:
            return "%.3g %s" % (rate / scale, unit)
    return "%.0f B/s" % rate


Diagnosis = collections.namedtuple("Diagnosis", "bottleneck advice")
Diagnosis.__doc__ = """What limits training, and what to do: :func:`diagnose`'s answer.

``bottleneck`` is one of :data:`BOTTLENECKS`, or None where there is nothing
to judge (no element, a span too short) or the input barely keeps up;
``advice`` the verdict's line.
"""

#: The stages a verdict can name.  Worker processes, the source in the Feeder's thread (or what idle producers
#: wait on), the GIL, an array dataset's gather, the bus (host to device, or host memory), the ring's slots,
#: the model itself, and an input of unknown kind (no feeder said how busy it is).
BOTTLENECKS = ("workers", "source", "gil", "gather", "bus", "capacity", "model", "input")


def diagnose(figures):
    """The bottleneck and the advice, from :class:`~theano_queue.tools.monitor.Figures` alone (no clock, no queue).

    The model's wait says *whether* the input limits training; what limits
    the input comes from the other measures, in this order: the GIL (the
    Feeder's thread waited for it), the bus (the rate at its limit), the
    producers (busy: workers, the gather or the source in the Feeder's
    thread, by what produces), then the ring (idle producers that found
    every slot held).  A full ring alone says nothing: producers that run
    flat out hold every slot too, and a larger capacity does not help them.
    """
    waited = figures.model_waited
    if figures.elements == 0:
        return Diagnosis(None, "no element was taken: nothing to judge")
    if figures.seconds < SHORTEST_JUDGED:
        return Diagnosis(
            None,
            "too short to judge: %d element(s) in %.0f ms, the model waited %.1f ms (a verdict needs %g s)"
            % (figures.elements, 1e3 * figures.seconds, 1e3 * waited * figures.seconds, SHORTEST_JUDGED),
        )
    if waited < COMPUTE_BOUND:
        return Diagnosis(
            "model",
            "compute-bound: input is never waited for (the model waited %.1f%% of the time)" % (100 * waited),
        )
    busy = figures.workers_busy
    flat_out = busy is not None and busy >= PRODUCERS_BUSY
    if waited < INPUT_BOUND:
        head = "balanced: the model waited %.1f%% of the time; input barely keeps up" % (100 * waited)
        if flat_out:
            return Diagnosis(None, head + " (%s: %s)" % (_who_is_busy(figures), _remedy(figures)))
        return Diagnosis(None, head + " (a larger capacity absorbs jitter)")
    return _input_bound(figures, waited, busy, flat_out)


def _input_bound(figures, waited, busy, flat_out):
    """:func:`diagnose` where the model waited at least :data:`INPUT_BOUND` of the time."""
    head = "the model waited %.0f%% of the time" % (100 * waited)
    if figures.feeder_gil_wait is not None and figures.feeder_gil_wait > GIL_BOUND:
        return Diagnosis(
            "gil",
            "input-bound by the GIL: %s and the feeder's thread waited %.0f%% of it for the GIL; use an array "
            "dataset, Feeder(q, (x, y)), or Feeder(..., workers=N)" % (head, 100 * figures.feeder_gil_wait),
        )
    if figures.bus_gbps and figures.gbps >= BUS_BOUND * figures.bus_gbps:
        return Diagnosis(
            "bus",
            "input-bound by the bus: %s at %.3g GB/s, %.0f%% of the %.3g GB/s limit; send fewer bytes per sample "
            "(uint8, converted on the device) or register the host memory (Queue.register_host)"
            % (head, figures.gbps, 100 * figures.gbps / figures.bus_gbps, figures.bus_gbps),
        )
    if busy is None:
        return Diagnosis("input", "input-bound: %s; add workers or use read_into" % head)
    if flat_out:
        stage = "gather" if figures.gather else "workers" if figures.workers else "source"
        return Diagnosis(
            stage, "input-bound by the %s: %s and %s; %s" % (stage, head, _who_is_busy(figures), _remedy(figures))
        )
    if figures.producers_waited >= RING_FULL:
        return Diagnosis(
            "capacity",
            "input-bound by the slots: %s while the producers, busy %.0f%%, waited %.0f%% for a free slot (every "
            "slot held: being written or lent to the graph); a larger capacity helps"
            % (head, 100 * busy, 100 * figures.producers_waited),
        )
    return Diagnosis(
        "source",
        "input-bound by the source: %s while the producers were busy only %.0f%%: what they wait on (reading the "
        "source, the Feeder's thread handing out work) is the limit; a faster source helps, more workers do not"
        % (head, 100 * busy),
    )


def _who_is_busy(figures):
    """'the 2 workers were busy 95%', 'the gather was busy 97%', "the Feeder's thread was busy 99%"."""
    share = 100 * figures.workers_busy
    if figures.gather:
        return "the copy pool gathered rows %.0f%% of the time" % share
    if figures.workers:
        return "the %d worker(s) were busy %.0f%%" % (figures.workers, share)
    return "the Feeder's thread was busy %.0f%% making elements" % share


def _remedy(figures):
    """What gives the busy producers more room, by who they are."""
    if figures.gather:
        return (
            'give the copy pool more threads (theano_queue._engine.set_copy_threads, or Queue(capacity="auto")); '
            "a larger capacity will not help"
        )
    if figures.workers:
        return 'add workers (workers=%d or more, or workers="auto"); a larger capacity will not help' % (
            figures.workers + 1
        )
    return (
        "move the work to worker processes (a map-style dataset with workers=N) or write in place with "
        "read_into; a larger capacity will not help"
    )


def verdict(figures):
    """One line: what limits training and what to do, from :class:`~theano_queue.tools.monitor.Figures`.

    The line of :func:`diagnose`:

    >>> from theano_queue.tools.monitor import Figures, verdict
    >>> verdict(Figures(seconds=10.0, elements=500, elements_per_s=50.0, gbps=0.01, mean_fill=0.1, capacity=3,
    ...                 model_waited=0.89, producers_waited=0.87, workers_busy=0.95, workers=2))
    'input-bound by the workers: the model waited 89% of the time and the 2 worker(s) were busy 95%; add workers \
(workers=3 or more, or workers="auto"); a larger capacity will not help'
    """
    return diagnose(figures).advice
