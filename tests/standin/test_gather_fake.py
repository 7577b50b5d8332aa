"""The CUDA backend's device gather on a machine without a GPU: tests/c/test_gather.c
drives the engine's CUDA backend against the stand-in driver (tests/c/fake_libcuda.c),
which does the batch copies on the host and, as the driver does, refuses a
second page-lock of any byte and a device-to-host copy into a buffer that
starts in page-locked memory and ends past it.  Each run checks every batch
against the rows it names, that the device copied exactly the components it
should, and that the process gave every registration, buffer and stream back."""

import os
import shutil
import subprocess

import pytest
from c_sources import engine_sources
from fake_cuda import NOTHING_HELD, ROOT, compile_stand_in

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

ENGINE = [*engine_sources("core", "cuda"), "tests/c/test_gather.c"]
LARGE_ROW = 256 * 1024  # the rows "auto" has the device copy: this large or larger


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
        compile_stand_in(str(where / name / "libcuda.so.1"), *flags)
    binary = str(where / "test_gather")
    common = [
        "gcc",
        "-std=gnu11",
        "-g",
        "-O1",
        "-Wall",
        "-Werror",
        "-Ic_code/engine/core",
        "-Ic_code/engine/cuda",
        "-Ic_code/python",
        "-Ic_code/generated",
        "-Itests/c",
        *ENGINE,
        "-o",
        binary,
        "-lpthread",
        "-ldl",
    ]
    sanitized = subprocess.run(common + ["-fsanitize=address,undefined"], cwd=ROOT, capture_output=True, text=True)
    if sanitized.returncode:
        build(common)
    return where


def run(where, *args, driver="new", **env):
    report = str(where / "report")
    environment = dict(
        os.environ,
        LD_LIBRARY_PATH=str(where / driver),
        FAKE_CUDA_REPORT=report,
        ASAN_OPTIONS="detect_leaks=1",
        UBSAN_OPTIONS="halt_on_error=1",
        **env,
    )
    done = subprocess.run(
        [str(where / "test_gather"), *args], capture_output=True, text=True, env=environment, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(" 0 failed")
    with open(report) as f:
        assert f.read().strip() == NOTHING_HELD  # registrations, buffers, streams: all given back


def test_the_batch_copy_gathers_every_component_exactly_odd_and_unaligned_rows(stand_ins):
    run(stand_ins, "gather", "batch", "batch")


def test_by_default_small_rows_are_gathered_on_the_host_and_nothing_is_page_locked(stand_ins):
    run(stand_ins, "gather", "auto", "host")


@pytest.mark.parametrize("mechanism", ["auto", "batch"])
def test_large_rows_are_copied_by_the_device_and_small_ones_only_when_forced(stand_ins, mechanism):
    run(stand_ins, "large", mechanism, "batch")


def test_a_dataset_held_on_the_device_is_gathered_there_by_the_kernel_exactly(stand_ins):
    # Odd row sizes, unaligned sources, partial batches: each batch equals its rows; one kernel per component;
    # the held memory and the row numbers' buffers are freed by gather_on_host.
    run(stand_ins, "gather", "device", "device")
    run(stand_ins, "large", "device", "device")


def test_a_held_dataset_needs_no_batch_copy_in_the_driver(stand_ins):
    run(stand_ins, "gather", "device", "device", driver="old")


def test_a_dataset_larger_than_the_free_device_memory_is_refused_with_the_sizes(stand_ins):
    # 37 rows of 100 KB do not fit in 1 MB: refused before any upload, nothing held, the host gathers as before.
    run(stand_ins, "refused", "device", str(100 * 1000), "GiB of device memory", FAKE_CUDA_FREE=str(1 << 20))


def test_a_held_dataset_that_fails_to_allocate_or_launch_names_the_call_and_holds_nothing(stand_ins):
    run(stand_ins, "held_failures")


def test_page_locked_ranges_are_exact_shared_and_register_hosts_are_reused(stand_ins):
    run(stand_ins, "ranges")


def test_an_old_driver_gathers_small_rows_on_the_host_without_a_word(stand_ins):
    run(stand_ins, "gather", "auto", "host", driver="old")


@pytest.mark.parametrize("mechanism", ["auto", "batch"])
def test_an_old_driver_refuses_the_device_gather_with_the_reason(stand_ins, mechanism):
    run(stand_ins, "refused", mechanism, str(LARGE_ROW), "lacks cuMemcpyBatchAsync", driver="old")


def test_a_dataset_too_large_to_page_lock_gathers_on_the_host(stand_ins):
    # The ring's own staging (about 76 KB) still registers; the dataset (116 KB) does not.
    run(
        stand_ins,
        "refused",
        "batch",
        str(784 * 4),
        "cuMemHostRegister: CUDA_ERROR_OUT_OF_MEMORY",
        FAKE_CUDA_REGISTER_LIMIT="100000",
    )
