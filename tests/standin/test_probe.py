"""theano_queue.tools.probe: host copy bandwidth here, the GPU measurements against the
stand-in driver (tests/c/fake_libcuda.c) in a subprocess, and on a real GPU."""

import os
import subprocess
import sys

import pytest
from fake_cuda import NOTHING_HELD, fake_cuda, held  # noqa: F401  (fake_cuda is a fixture)

from theano_queue import _engine
from theano_queue.core.paths import c_code_dir
from theano_queue.tools import probe

MiB = 1 << 20


def test_host_copy_through_the_engine_and_numpy():
    threads = _engine.copy_threads()
    assert probe.host_copy_gbps(8 * MiB, repeats=2) > 0.1
    assert probe.host_copy_gbps(8 * MiB, threads=1, repeats=2) > 0.1
    assert _engine.copy_threads() == threads  # the pool is put back as it was
    assert probe.host_copy_gbps(8 * MiB, repeats=2, via="numpy") > 0.1
    with pytest.raises(ValueError, match="via"):
        probe.host_copy_gbps(MiB, via="memcpy")
    with pytest.raises(ValueError, match=">= 1"):
        probe.host_copy_gbps(0)


@pytest.mark.parametrize("via", ["engine", "numpy"])
def test_host_copy_statistic_picks_the_best_or_the_median_copy(monkeypatch, via):
    """Copies of 9 (the warm-up, dropped), 1, 2 and 4 s: the best is 1 s, the median 2 s."""
    ticks = iter([0, 9, 10, 11, 20, 22, 30, 34])
    monkeypatch.setattr(probe.time, "perf_counter", lambda: next(ticks))
    assert probe.host_copy_gbps(MiB, repeats=3, via=via) == pytest.approx(MiB / 1 / 1e9)
    ticks = iter([0, 9, 10, 11, 20, 22, 30, 34])
    assert probe.host_copy_gbps(MiB, repeats=3, via=via, statistic="median") == pytest.approx(MiB / 2 / 1e9)
    with pytest.raises(ValueError, match="statistic must be 'best' or 'median', got 'mean'"):
        probe.host_copy_gbps(MiB, statistic="mean")


def test_limits_per_source_kind():
    rows = {source.split(" (")[0]: gbps for source, gbps, why in probe.limits(55.0, 10.0, 45.0)}
    assert rows["registered"] == 55.0
    assert rows["numpy arrays put or fed"] == pytest.approx(30.0)  # 2/3 of the copy: below the bus
    assert rows["pageable memory handed to the driver"] == 10.0
    assert rows["host-memory queue"] == 45.0
    no_gpu = {source.split(" (")[0]: gbps for source, gbps, why in probe.limits(copy_gbps=45.0)}
    assert no_gpu["registered"] is None and no_gpu["numpy arrays put or fed"] == pytest.approx(30.0)


SCRIPT = """
from theano_queue.tools.probe import h2d_seconds, devices, self_check
pinned = h2d_seconds(1 << 20, 3, None)              # the signature bench/ calls
pageable = h2d_seconds(1 << 20, 3, context_name=None, pinned=False)
assert pinned > 0 and pageable > 0
assert [d["name"] for d in devices()] == ["Fake GPU 0", "Fake GPU 1"]
assert h2d_seconds(1 << 20, 2, device=1) > 0
for memory in ("pinned", "pageable", "registered", "shared", "huge"):  # each registered one is unregistered
    assert h2d_seconds(3 << 20, 2, memory=memory) > 0
try:
    h2d_seconds(1 << 20, 2, memory="managed")
except ValueError as exc:
    print(exc)
assert self_check(1)["copy_engine"][0]
try:
    h2d_seconds(1 << 20, 2, device=2)
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_gpu_measurements_against_the_stand_in_driver(fake_cuda):  # noqa: F811
    env = dict(os.environ, FAKE_CUDA_DEVICES="2", **fake_cuda)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split("\n") == [
        "h2d_seconds: memory must be one of pinned, pageable, registered, shared, huge, got 'managed'",
        "CudaError cuDevicePrimaryCtxRetain: CUDA_ERROR_FAKE (fake failure)",
    ]
    assert held(fake_cuda) == NOTHING_HELD


def test_huge_pages_of_each_kind_of_mapping():
    """Whatever the kernel's settings, a mapping that asks for huge pages gets at least as many as one that
    does not, and a share is a share."""
    shares = {kind: probe.huge_page_share(8 * MiB, kind) for kind in ("registered", "shared", "huge")}
    assert all(0.0 <= share <= 1.0 for share in shares.values()), shares
    assert shares["huge"] >= shares["registered"], shares
    assert probe.host_write_gbps(8 * MiB, "shared", repeats=2) > 0.1
    with pytest.raises(ValueError, match=">= 1"):
        probe.host_write_gbps(0, "huge")


def test_a_theano_context_name_must_be_one():
    with pytest.raises(ValueError, match="not a Theano GPU context"):
        probe.theano_device("no_such_context")


def test_libgpuarray_is_only_asked_once_it_is_loaded():
    """gpuarray_enter_exit (theano_device's, and bench/step_floor.py's) never loads libgpuarray itself: in a
    process that has not (no Theano on a GPU) it says so."""
    code = (
        "from theano_queue.tools import probe\n"
        "try:\n    probe.gpuarray_enter_exit()\n"
        "except probe.CudaError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "probe: libgpuarray is not loaded (is Theano on a GPU?)" in out


def engine_driver_list():
    """{field: (symbol, number of parameters)} of the engine's driver binding (c_code/engine/cuda/tq_cuda_driver.h)."""
    with open(os.path.join(c_code_dir(), "engine", "cuda", "tq_cuda_driver.h")) as f:
        text = f.read().replace("\\\n", " ")
    bound, at = {}, 0
    while True:
        at = text.find("X(", at)
        if at < 0:
            return bound
        depth, end = 0, at + 1
        for end in range(at + 1, len(text)):  # the X(...) with its nested parentheses
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        field, symbol, params = (part.strip() for part in text[at + 2 : end].split(",", 2))
        if field.isidentifier() and symbol.startswith("cu"):
            inner, depth, commas = params.strip()[1:-1], 0, 0
            for char in inner:
                depth += {"(": 1, ")": -1}.get(char, 0)
                commas += char == "," and depth == 0
            bound[field] = (symbol, commas + 1)
        at = end


def test_probe_binds_the_driver_as_the_engine_does():
    engine = engine_driver_list()
    assert {"Init", "MemAlloc", "CtxPushCurrent", "MemcpyHtoDAsync"} <= set(engine)  # the parse found the list
    shared = set(engine) & set(probe._SIGNATURES)
    assert len(shared) >= 10
    for field in sorted(shared):
        argtypes, symbols = probe._SIGNATURES[field]
        assert (symbols[0], len(argtypes)) == engine[field], field
