"""What tests/cpu/test_gil_handover.py and tests/gpu/test_gil_handover_gpu.py share."""

import sys
import time

import numpy as np
import theano

import theano_queue as tq
from theano_queue import _engine

STEPS = 100


def hold_gil(seconds):
    """Python work that keeps the GIL (no blocking call), as a step of Theano's VM does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def steps_finding_an_element(hand_over, capacity=2, target="cpu", source=None):
    """Of STEPS dequeues in a loop that holds the GIL, how many found an element ready; and the Feeder's stats.

    source(i) makes element i (its first value must be unique to it: the check of the order reads it);
    by default an array of 8 values from i.
    """
    x = np.arange(8, dtype="float32")
    source = source or (lambda i: x + i)
    shape = source(0).shape
    q = tq.Queue([("x", "float32", shape)], capacity=capacity, target=target)
    step = theano.function([], q.dequeue())
    was, interval = _engine.set_gil_hand_over(hand_over), sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # no forced switch: the loop gives the GIL up only where it blocks or hands over
    ready, taken = 0, []
    hand_overs = q._ring.hand_overs()
    try:
        with tq.Feeder(q, (source(i) for i in range(STEPS + capacity + 1)), close_when_done=False) as feeder:
            for _ in range(STEPS):
                ready += q.size() > 0
                taken.append(float(np.asarray(step()).flat[0]))
                hold_gil(0.0005)
            stats = feeder.stats()
        stats["hand_overs_taken"] = q._ring.hand_overs()[0] - hand_overs[0]
    finally:
        sys.setswitchinterval(interval)
        _engine.set_gil_hand_over(was)
    assert taken == [float(source(i).flat[0]) for i in range(STEPS)]  # in order, none lost, none repeated
    return ready, stats
