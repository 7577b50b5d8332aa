"""One scenario, two drivers: a test body that runs against the stand-in CUDA driver (tests/c/fake_libcuda.c,
on any machine) and, unchanged, on the GPU Theano runs on (marked gpu: the lead's H200 run).

A test takes the ``driver`` fixture and calls ``driver.run(body)``: the body runs in a fresh process (a process
loads one CUDA driver, once) with ``make_ring(spec, capacity=2, name="q")`` making a GPU ring on that driver,
``staging_holds`` (tests/support/staging.py), ``np`` and ``_engine`` at hand.  Under the stand-in, the process must
also give every context, allocation, stream and registration back.
"""

import os
import subprocess
import sys
import textwrap

import pytest
from fake_cuda import NOTHING_HELD, ROOT, fake_cuda, held  # noqa: F401  (fake_cuda: the fixture driver uses)

SUPPORT = os.path.dirname(os.path.abspath(__file__))  # the helper modules
STAND_IN, GPU = "stand-in", "gpu"

PRELUDES = {
    STAND_IN: """
from fake_device import gpu_ring, free_device_memory
def make_ring(spec, capacity=2, name="q"):
    return gpu_ring(spec, capacity, name)[0]
""",
    GPU: """
from theano.gpuarray.type import get_context
from theano_queue.core.target import theano_gpu_contexts
def free_device_memory():
    pass
def make_ring(spec, capacity=2, name="q"):
    context = None if None in theano_gpu_contexts() else theano_gpu_contexts()[0]
    return _engine.Ring(name, spec, capacity, gpu_context=get_context(context).ptr)
""",
}


class Driver:
    def __init__(self, kind, env):
        self.kind, self.env = kind, env

    def run(self, body):
        """Runs body in a process on this driver; its stdout."""
        script = "\n".join(
            [
                "import numpy as np",
                "from theano_queue import _engine",
                "from staging import staging_holds",
                PRELUDES[self.kind],
                textwrap.dedent(body),
                "free_device_memory()",
            ]
        )
        environment = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [ROOT, SUPPORT, os.environ.get("PYTHONPATH")])),
            **self.env,
        )
        # Theano marks its GPU as taken in the environment, for forked children; this one is a fresh process.
        environment.pop("THEANO_GPU_IS_ALREADY_ACTIVE", None)
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=environment, cwd=ROOT, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        if self.kind == STAND_IN:
            assert held(self.env) == NOTHING_HELD
        return done.stdout


@pytest.fixture(params=[pytest.param(STAND_IN, id=STAND_IN), pytest.param(GPU, id=GPU, marks=pytest.mark.gpu)])
def driver(request):
    """The driver a scenario runs on: the stand-in (built with gcc) or the GPU."""
    if request.param == STAND_IN:
        return Driver(STAND_IN, request.getfixturevalue("fake_cuda"))
    return Driver(GPU, {})
