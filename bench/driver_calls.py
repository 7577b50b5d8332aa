"""The driver calls of one small GPU step, counted and timed per call (issue 28).

    python -m bench.driver_calls            # on the GPU that THEANO_FLAGS names

Builds ``bench/driver_calls.c`` (gcc), a stand-in libcuda that wraps the real
one, and runs again under it: as the engine's driver (``THEANO_QUEUE_LIBCUDA``)
and as libgpuarray's (first on ``LD_LIBRARY_PATH``).  Then, for the MNIST
batch of ``bench.dequeue_cost`` in a step that reads two of its values back:
the resident step (the batch in shared variables), and the step dequeuing
from a pre-filled ring and from a dataset held in GPU memory, lent and copied.
Per step: the GpuDequeue's host time (Theano's profiler) and, per driver
function, the calls and their wall time, on the step's thread and on the
others (the Feeder's, the copy pool's).  What a dequeue costs beyond its
driver calls is its host time less theirs.
"""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def relaunch_under_the_wrapper():
    """Builds the wrapper and runs this module again with it as libcuda; returns the exit status."""
    real = next(
        (
            line.split()[-1]
            for line in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout.split("\n")
            if "libcuda.so.1 " in line
        ),
        "libcuda.so.1",
    )
    folder = tempfile.mkdtemp(prefix="driver_calls")
    try:
        library = os.path.join(folder, "libcuda.so")
        subprocess.run(
            [
                "gcc",
                "-O2",
                "-shared",
                "-fPIC",
                os.path.join(HERE, "driver_calls.c"),
                "-o",
                library,
                "-ldl",
                "-lpthread",
                "-Wl,--no-as-needed",
                real,
            ],
            check=True,
        )
        env = dict(os.environ, THEANO_QUEUE_LIBCUDA=library, REAL_LIBCUDA=real)
        env["LD_LIBRARY_PATH"] = folder + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        return subprocess.run([sys.executable, "-m", "bench.driver_calls"], env=env).returncode
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(wrapper, step, steps, label):
    """Prints the step's wall time, its dequeue's host time and the driver calls per step."""
    for _ in range(5):
        step()
    profile = step.profile
    nodes = [n for n in profile.apply_time if "Dequeue" in type(n.op).__name__]
    before = profile.apply_time[nodes[0]] if nodes else 0.0
    wrapper.driver_calls_reset()
    began = time.perf_counter()
    for _ in range(steps):
        step()
    per_step = 1e6 * (time.perf_counter() - began) / steps
    dequeue = "%.1f us" % (1e6 * (profile.apply_time[nodes[0]] - before) / steps) if nodes else "-"
    report = ctypes.create_string_buffer(8192)
    wrapper.driver_calls_report(report, len(report), ctypes.c_double(steps))
    print("%s: step %.1f us, dequeue %s" % (label, per_step, dequeue))
    print(report.value.decode(), flush=True)


def main(steps=300, prefill=40):
    import numpy as np
    import theano

    import theano_queue as tq
    from bench.dequeue_cost import SPEC
    from theano_queue import _engine

    wrapper = ctypes.CDLL(os.environ["THEANO_QUEUE_LIBCUDA"])
    wrapper.driver_calls_report.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_double]
    batch = (np.ones((500, 784), "float32"), np.zeros(500, "int32"))
    data = np.random.default_rng(0).standard_normal((50000, 784)).astype("float32"), np.zeros(50000, "int32")
    resident = theano.function([], theano.shared(batch[0])[0, 0] + theano.shared(batch[1])[0], profile=True)
    measure(wrapper, resident, steps, "resident")
    prefilled = tq.Queue(SPEC, capacity=prefill, name="prefilled")
    held = tq.Queue(SPEC, capacity=3, name="held")
    if not prefilled.on_gpu:
        raise SystemExit("bench.driver_calls: needs Theano on a GPU (THEANO_FLAGS=device=cuda0)")
    for lend in (True, False):
        was = _engine.set_device_lending(lend)
        try:
            x, y = prefilled.dequeue()
            step = theano.function([], x[0, 0] + y[0], profile=True)
            # The ring's blocks are lent over and over: a first pass over them (4 * prefill dequeues) makes the
            # node's buffers for each, and the runs after it are what a long training loop sees.
            for _ in range(4):
                for _ in range(prefill - 5):
                    prefilled.put(batch)
                for _ in range(prefill - 5):
                    step()
            for _ in range(prefill - 5):
                prefilled.put(batch)
            for _ in range(30):
                resident()  # the copies have landed, the GPU kept busy
            measure(wrapper, step, prefill - 10, "pre-filled ring, lent %s" % lend)
            with tq.Feeder(held, data, shuffle=True, epochs=None, drop_last=True, close_when_done=False, device=True):
                x, y = held.dequeue()
                step = theano.function([], x[0, 0] + y[0], profile=True)
                measure(wrapper, step, steps, "held dataset, lent %s" % lend)
            held.close(cancel_pending=True)
            held.reopen()
        finally:
            _engine.set_device_lending(was)


if __name__ == "__main__":
    if "THEANO_QUEUE_LIBCUDA" not in os.environ:
        sys.exit(relaunch_under_the_wrapper())
    main()
