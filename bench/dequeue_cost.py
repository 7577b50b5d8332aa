"""The host time of one GPU dequeue: Theano's profiler around the GpuDequeue thunk (issue 28).

    python -m bench.dequeue_cost            # on the GPU that THEANO_FLAGS names

The MNIST batch (500x784 float32, 500 int32 labels), in a step that reads two
of its values back, from a ring filled beforehand and from a dataset held in
GPU memory (``device=True``), with the slot's block lent to the graph and with
device lending off (``_engine.set_device_lending(False)``: copied into the
node's outputs), in interleaved rounds.  What a small step pays per input:
the host time the dequeue adds to a step whose own host time is the step.
"""

import time

import numpy as np
import theano

import theano_queue as tq
from theano_queue import _engine

SPEC = [("x", "float32", (500, 784)), ("y", "int32", (500,))]


def compiled_step(queue):
    """A step that dequeues from ``queue`` and reads two of its values back, profiled."""
    x, y = queue.dequeue()
    return theano.function([], x[0, 0] + y[0], profile=True)


def dequeue_us(step, calls, queue=None, fill=None):
    """Microseconds of host time per GpuDequeue call, and per step, over `calls` steps after 5 more.

    With ``fill``, ``calls + 5`` copies of it are put into ``queue`` first.  One ``step`` is used
    again and again: its node keeps the buffers that wrap the blocks it was lent, a ring's slots'
    and spares', and a step's first pass over a ring pays for making them."""
    if fill is not None:
        for _ in range(calls + 5):
            queue.put(fill)
        time.sleep(0.05)  # the copies have landed (no GPU step is timed against this one)
    for _ in range(5):
        step()
    profile = step.profile
    node = next(n for n in profile.apply_time if "Dequeue" in type(n.op).__name__)
    before = profile.apply_time[node]
    began = time.perf_counter()
    for _ in range(calls):
        step()
    per_step = (time.perf_counter() - began) / calls
    return 1e6 * (profile.apply_time[node] - before) / calls, 1e6 * per_step


def main(rounds=3):
    batch = (np.ones((500, 784), "float32"), np.zeros(500, "int32"))
    data = np.random.default_rng(0).standard_normal((50000, 784)).astype("float32"), np.zeros(50000, "int32")
    prefilled = tq.Queue(SPEC, capacity=260, name="prefilled")
    held = tq.Queue(SPEC, capacity=3, name="held")
    if not prefilled.on_gpu:
        raise SystemExit("bench.dequeue_cost: needs Theano on a GPU (THEANO_FLAGS=device=cuda0)")
    steps = {lend: (compiled_step(prefilled), compiled_step(held)) for lend in (True, False)}
    for r in range(rounds):
        for lend in (True, False):
            from_ring, from_held = steps[lend]
            was = _engine.set_device_lending(lend)
            try:
                print(
                    "round %d, pre-filled ring, lent %-5s: dequeue %.1f us, step %.1f us%s"
                    % ((r + 1, lend) + dequeue_us(from_ring, 250, prefilled, batch) + (" (first pass)" * (r == 0),)),
                    flush=True,
                )
                feeder = tq.Feeder(
                    held, data, shuffle=True, epochs=None, drop_last=True, close_when_done=False, device=True
                )
                with feeder:
                    dequeue_us(from_held, 20)  # the Feeder's start, not counted
                    print(
                        "round %d, held dataset,    lent %-5s: dequeue %.1f us, step %.1f us"
                        % ((r + 1, lend) + dequeue_us(from_held, 300)),
                        flush=True,
                    )
                held.close(cancel_pending=True)
                held.reopen()
            finally:
                _engine.set_device_lending(was)


if __name__ == "__main__":
    main()
