"""A stand-in CUDA driver for tests (tests/c/fake_libcuda.c): the probe, the
CLI's GPU paths, device-array puts and the device gather run against it on a
machine without a GPU, and it reports what they left held."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: What the stand-in reports at exit when everything was given back:
#: retained contexts, pushed contexts, pinned and device allocations, streams,
#: registered host ranges, loaded modules, graphs and executable graphs.
NOTHING_HELD = "0 0 0 0 0 0 0 0"


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory):
    """Environment variables that make theano_queue.tools.probe load the stand-in."""
    return build_stand_in(tmp_path_factory)


def build_stand_in(tmp_path_factory):
    """Build the stand-in driver in a fresh temporary folder (skips without gcc); returns the environment
    variables that make theano_queue load it and report what it held."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the stand-in CUDA driver")
    where = tmp_path_factory.mktemp("fake_cuda")
    library = compile_stand_in(str(where / "libcuda.so.1"))
    return {"THEANO_QUEUE_LIBCUDA": library, "FAKE_CUDA_REPORT": str(where / "report")}


def compile_stand_in(library, *flags):
    """Compiles tests/c/fake_libcuda.c (``flags``: its -D options) into the shared library ``library``."""
    command = ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *flags, "-o", library]
    done = subprocess.run(
        [*command, os.path.join(ROOT, "tests", "c", "fake_libcuda.c")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return library


def held(fake):
    """What the last process that used the stand-in still held at exit."""
    with open(fake["FAKE_CUDA_REPORT"]) as f:
        return f.read().strip()
