"""The CUDA backend's device gather on a machine without a GPU: tests/c/test_gather.c
drives the engine's CUDA backend against the stand-in driver and NVRTC
(tests/c/fake_libcuda.c, fake_libnvrtc.c), whose kernel launch does the
gather on the host and refuses misaligned words as a GPU does.  Each run
checks every batch against the rows it names, that the device gathered
exactly when attached, and that the process gave every registration, module,
buffer and stream back."""
import os
import shutil
import subprocess

import pytest

from fake_cuda import NOTHING_HELD, ROOT

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

ENGINE = ["c_code/tq_base.c", "c_code/tq_ring.c", "c_code/tq_cuda.c", "c_code/tq_copy.c", "c_code/tq_gather.c",
          "c_code/tq_nvrtc.c", "c_code/tq_trace.c", "c_code/tq_shm.c", "tests/c/test_gather.c"]


def build(command):
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """The test binary (built with AddressSanitizer where gcc has it), and directories holding a
    stand-in libcuda.so.1 with cuMemcpyBatchAsync (CUDA 13) and one without (before 12.8)."""
    where = tmp_path_factory.mktemp("gather")
    for name, flags in (("new", []), ("old", ["-DFAKE_CUDA_BEFORE_12_8"])):
        os.mkdir(str(where / name))
        build(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *flags, "-o", str(where / name / "libcuda.so.1"),
               "tests/c/fake_libcuda.c"])
    build(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(where / "libnvrtc.so"),
           "tests/c/fake_libnvrtc.c"])
    binary = str(where / "test_gather")
    common = ["gcc", "-std=gnu11", "-g", "-O1", "-Wall", "-Werror", "-Ic_code", "-Itests/c", *ENGINE, "-o", binary,
              "-lpthread", "-ldl"]
    sanitized = subprocess.run(common + ["-fsanitize=address,undefined"], cwd=ROOT, capture_output=True, text=True)
    if sanitized.returncode:
        build(common)
    return where


def run(where, *args, driver="new", nvrtc=True, **env):
    report = str(where / "report")
    environment = dict(os.environ, LD_LIBRARY_PATH=str(where / driver), FAKE_CUDA_REPORT=report,
                       THEANO_QUEUE_LIBNVRTC=str(where / "libnvrtc.so") if nvrtc else "/nonexistent/libnvrtc.so",
                       ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="halt_on_error=1", **env)
    done = subprocess.run([str(where / "test_gather"), *args], capture_output=True, text=True, env=environment,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(" 0 failed")
    with open(report) as f:
        assert f.read().strip() == NOTHING_HELD  # registrations, modules, index buffers, streams: all given back


@pytest.mark.parametrize("mechanism", ["kernel", "batch"])
def test_each_mechanism_gathers_exactly_odd_and_unaligned_rows(stand_ins, mechanism):
    run(stand_ins, "gather", mechanism, mechanism)


def test_the_default_is_the_kernel_where_nvrtc_is(stand_ins):
    run(stand_ins, "gather", "auto", "kernel")


def test_without_nvrtc_the_default_is_the_batch_copy(stand_ins):
    run(stand_ins, "gather", "auto", "batch", nvrtc=False)


def test_without_nvrtc_the_kernel_is_refused_with_the_reason(stand_ins):
    run(stand_ins, "refused", "kernel", "NVRTC (libnvrtc.so) could not be loaded", nvrtc=False)


def test_a_kernel_that_does_not_compile_is_refused_with_nvrtcs_log(stand_ins):
    run(stand_ins, "refused", "kernel", "fake compile error", FAKE_NVRTC_FAIL="1")


def test_an_old_driver_without_nvrtc_gathers_on_the_host(stand_ins):
    run(stand_ins, "refused", "auto", "lacks cuMemcpyBatchAsync", driver="old", nvrtc=False)


def test_a_dataset_too_large_to_page_lock_gathers_on_the_host(stand_ins):
    # The ring's own staging (about 76 KB) still registers; the dataset (116 KB) does not.
    run(stand_ins, "refused", "auto", "cuMemHostRegister: CUDA_ERROR_OUT_OF_MEMORY", FAKE_CUDA_REGISTER_LIMIT="100000")
