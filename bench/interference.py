"""What a second thread's CUDA work costs a small resident step (issue 10, small steps).

    python -m bench.interference [--shape 256x784] [--hidden 1024]

Scenario 19 showed the queue-fed step of a small MLP at 1.25-1.3x the
resident step while a producer runs, but at 1.05x from a queue filled
beforehand.  This separates what any producer thread costs the step from
what ours does: the resident step (no queue at all) is timed alone and
beside a thread that, once per step period and without the GIL,

  sleep      only wakes up (a thread's wake-ups and the GIL's hand-offs)
  memcpy     copies one batch in host memory
  h2d        copies one batch from pinned memory to the GPU on a stream of its
             own and waits for it (the driver calls of a producer, no queue)

interleaved in rounds, best of the rounds.  Needs Theano on a CUDA GPU.
"""

import argparse
import ctypes
import threading
import time

import numpy as np
import theano

from bench.common import mlp_train_step, reading, time_steps  # noqa: E402


class Driver:
    """The few libcuda calls the h2d thread makes, in the primary context (libgpuarray's)."""

    def __init__(self, nbytes):
        self.cu = cu = ctypes.CDLL("libcuda.so.1")
        self.ctx = ctypes.c_void_p()
        self.check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), 0))
        self.check(cu.cuCtxSetCurrent(self.ctx))
        self.host, self.dev, self.stream = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_void_p()
        self.check(cu.cuMemHostAlloc(ctypes.byref(self.host), ctypes.c_size_t(nbytes), 0))
        self.check(cu.cuMemAlloc_v2(ctypes.byref(self.dev), ctypes.c_size_t(nbytes)))
        self.check(cu.cuStreamCreate(ctypes.byref(self.stream), 1))
        self.nbytes = nbytes

    @staticmethod
    def check(rc):
        if rc:
            raise RuntimeError("CUDA error %d" % rc)

    def enter(self):
        self.check(self.cu.cuCtxSetCurrent(self.ctx))

    def copy(self):
        self.check(self.cu.cuMemcpyHtoDAsync_v2(self.dev, self.host, ctypes.c_size_t(self.nbytes), self.stream))
        self.check(self.cu.cuStreamSynchronize(self.stream))


def background(kind, period, stop, batch, driver):
    libc = ctypes.CDLL(None)
    src, dst = batch, np.empty_like(batch)
    if kind == "h2d":
        driver.enter()
    while not stop.is_set():
        started = time.perf_counter()
        if kind == "memcpy":
            np.copyto(dst, src)
        elif kind == "h2d":
            driver.copy()
        left = period - (time.perf_counter() - started)
        if left > 0:
            libc.usleep(int(left * 1e6))  # ctypes lets the GIL go, as a waiting producer does


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="256x784")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rows, cols = (int(v) for v in args.shape.split("x"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype("float32")
    y = rng.integers(0, 10, rows).astype("int32")
    loss, updates = mlp_train_step(theano.shared(x), theano.shared(y), cols, args.hidden, 10, np.random.default_rng(1))
    step = reading(theano.function([], loss, updates=updates))
    period = time_steps(step, args.steps)
    driver = Driver(x.nbytes)
    kinds = ["alone", "sleep", "memcpy", "h2d"]
    best = {k: float("inf") for k in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            stop = threading.Event()
            thread = None
            if kind != "alone":
                thread = threading.Thread(target=background, args=(kind, period, stop, x, driver), daemon=True)
                thread.start()
            best[kind] = min(best[kind], time_steps(step, args.steps))
            stop.set()
            if thread:
                thread.join()
    print("resident step %s, hidden %d: %.1f us alone" % (args.shape, args.hidden, 1e6 * best["alone"]))
    for kind in kinds[1:]:
        print("  beside a %-6s thread: %.1f us, %.3f x alone" % (kind, 1e6 * best[kind], best[kind] / best["alone"]))


if __name__ == "__main__":
    main()
