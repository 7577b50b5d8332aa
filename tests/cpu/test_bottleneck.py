"""The monitor's verdict names the measured bottleneck (issues 41.4, 44.4): case by case from synthetic measures,
and once end to end with slow workers."""

import io

import pytest
from worker_datasets import SPEC, Tagged

import theano_queue as tq
from theano_queue.tools.monitor import BOTTLENECKS, Figures, diagnose, verdict


def measured(waited, busy=None, workers=None, ring_full=0.0, gather=False, gbps=0.1, bus=None, gil=None):
    """Ten seconds of training with these shares of the time."""
    return Figures(
        seconds=10.0,
        elements=500,
        elements_per_s=50.0,
        gbps=gbps,
        mean_fill=0.2,
        capacity=4,
        model_waited=waited,
        producers_waited=ring_full,
        workers_busy=busy,
        feeder_gil_wait=gil,
        workers=workers,
        gather=gather,
        bus_gbps=bus,
    )


def test_busy_workers_with_a_full_ring_want_workers_not_capacity():
    """The trial's line: "model waited 89%, workers busy 95%, ring full 87%": capacity 2, 4 and 8 all left the
    model waiting; more workers was the fix."""
    found = diagnose(measured(0.89, busy=0.95, workers=2, ring_full=0.87))
    assert found.bottleneck == "workers"
    assert "add workers (workers=3 or more" in found.advice
    assert "a larger capacity will not help" in found.advice
    assert "larger capacity helps" not in found.advice


@pytest.mark.parametrize(
    "figures, bottleneck, words",
    [
        (measured(0.5, busy=0.97, workers=0), "source", "move the work to worker processes"),
        (measured(0.5, busy=0.3, workers=4, ring_full=0.0), "source", "a faster source helps, more workers do not"),
        (measured(0.5, busy=0.96, workers=0, gather=True), "gather", "give the copy pool more threads"),
        (measured(0.5, busy=0.5, workers=0, gather=True, gbps=9.0, bus=10.0), "bus", "send fewer bytes per sample"),
        (measured(0.5, busy=0.3, workers=2, ring_full=0.9), "capacity", "a larger capacity helps"),
        (measured(0.5, busy=0.9, workers=0, gil=0.7), "gil", "use an array dataset"),
        (measured(0.5), "input", "add workers or use read_into"),
        (measured(0.001, busy=0.99, workers=2, ring_full=3.0), "model", "input is never waited for"),
    ],
)
def test_each_bottleneck_gets_its_own_advice(figures, bottleneck, words):
    found = diagnose(figures)
    assert found.bottleneck == bottleneck and bottleneck in BOTTLENECKS
    assert words in found.advice
    assert verdict(figures) == found.advice


def test_the_bus_is_judged_only_against_a_known_limit():
    fast = measured(0.5, busy=0.97, workers=3, gbps=9.0)
    assert diagnose(fast).bottleneck == "workers"
    assert diagnose(fast._replace(bus_gbps=100.0)).bottleneck == "workers"
    assert diagnose(fast._replace(bus_gbps=10.0)).bottleneck == "bus"


def test_balanced_names_busy_producers_and_otherwise_jitter():
    busy = verdict(measured(0.02, busy=0.95, workers=2))
    assert busy.startswith("balanced: the model waited 2.0% of the time") and "add workers" in busy
    calm = verdict(measured(0.02, busy=0.4, workers=2))
    assert calm.endswith("(a larger capacity absorbs jitter)")
    assert diagnose(measured(0.02, busy=0.95, workers=2)).bottleneck is None


def test_nothing_to_judge_names_no_bottleneck():
    assert diagnose(measured(0.5)._replace(elements=0)).bottleneck is None
    assert diagnose(measured(0.5)._replace(seconds=0.01)).bottleneck is None


def test_slow_workers_end_to_end_verdict_is_more_workers():
    """One worker whose samples each take 10 ms, a model that takes them at once: the workers are the bottleneck,
    whatever the ring's fill."""
    q = tq.Queue(SPEC, capacity=4, target="cpu", name="slow")
    out = io.StringIO()
    with tq.Feeder(q, Tagged(8 * 12, slow="all", slow_s=0.01), workers=1, progress={"file": out, "interval": 0.05}):
        for _ in range(12):
            q.get()
    last = out.getvalue().rstrip().splitlines()[-1]
    assert last.startswith("slow: input-bound by the workers:"), out.getvalue()
    assert 'workers="auto"' in last and "a larger capacity will not help" in last
