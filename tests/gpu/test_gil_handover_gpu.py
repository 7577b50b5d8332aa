"""The GPU half of tests/cpu/test_gil_handover.py: a Feeder keeps up with a GIL-holding loop on a GPU queue.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_gil_handover_gpu.py``."""

import pytest
from gil_handover_helpers import STEPS, steps_finding_an_element

pytestmark = pytest.mark.gpu


@pytest.mark.gpu
def test_a_feeder_keeps_up_with_a_loop_that_holds_the_gil_on_a_gpu_queue():
    ready, stats = steps_finding_an_element(hand_over=True, target=None)  # the queue on Theano's GPU
    assert ready >= 0.85 * STEPS, ready
    # Each element was either copied by the ring's putter (its put kept the GIL) or waited for the GIL after
    # its put's copy, and a dequeue handed the GIL over to it.
    assert stats["hand_overs_taken"] > 0, stats
