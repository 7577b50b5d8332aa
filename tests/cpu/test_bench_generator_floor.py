"""bench/generator_step.py's floor for a generator Feeder (issue 43.1): the resident step with the same
generator drawn beside it by a plain thread through ``queue.Queue``, no theano_queue.  Scenario 20's fed step
at 0.2 ms ran at 1.71 x resident with no floor to say how much of it the generator's GIL alone costs."""

import threading
import time

import numpy as np

from bench import generator_step


def small_step():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((2000, generator_step.COLS)).astype("float32")
    labels = rng.integers(0, 10, 2000).astype("int32")
    return generator_step.Step(data, labels, hidden=16, capacity=3, prefill=8)


def test_the_generator_floor_is_a_part_set_against_resident_and_the_fed_part_over_it():
    assert "generator beside" in generator_step.PARTS and "generator beside" in generator_step.PAIRED
    results = generator_step.run(targets_ms=(0.2,), steps=5, rounds=1, samples=2000)
    ratios = results[0]["ratios"]
    assert ratios["fed / generator beside"] > 0 and ratios["generator beside / resident"] > 0


def test_the_step_waits_for_a_generator_slower_than_itself_and_no_thread_is_left_behind():
    step = small_step()
    drawn = []

    def slow():
        while True:
            time.sleep(0.004)
            drawn.append(1)
            yield step.data[:500], step.labels[:500]

    threads = threading.active_count()
    seconds = step.beside_generator(20, slow())
    assert seconds >= 0.0035  # bounded by the generator, as a Feeder's ring would make it
    assert threading.active_count() == threads
    assert 23 <= len(drawn) <= 23 + 3 + 1  # the timed and warm-up steps' batches, and at most a ring ahead
