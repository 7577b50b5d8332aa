"""The engine's own C tests, without Python, built with gcc and run under ThreadSanitizer, AddressSanitizer +
UndefinedBehaviorSanitizer, and plainly: tests/c/test_ring.c (the ring and the copy pool, with a backend that
fails on demand, tests/c/test_backend.c), tests/c/test_pack.c (variable-length rows packed,
c_code/engine/core/tq_pack.c)
and tests/c/test_rows.c (strided and cast rows gathered, c_code/engine/core/tq_gather.c)."""

import os
import shutil
import subprocess

import pytest
from c_sources import ROOT, engine_sources

PROGRAMS = {
    "ring": ["tests/c/test_backend.c", "tests/c/test_ring.c"],
    "pack": ["tests/c/test_pack.c"],
    "rows": ["tests/c/test_rows.c"],
}
BUILDS = {"plain": ["-O2"], "thread": ["-O1", "-fsanitize=thread"], "address": ["-O1", "-fsanitize=address,undefined"]}
FLAGS = [
    "-std=gnu11",
    "-g",
    "-Wall",
    "-Werror",
    "-Ic_code/engine/core",
    "-Ic_code/engine/cuda",
    "-Ic_code/python",
    "-Ic_code/generated",
    "-Itests/c",
]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_engine_in_c(program, build, tmp_path):
    binary = str(tmp_path / ("test_%s_%s" % (program, build)))
    sources = [*engine_sources("core"), *PROGRAMS[program]]
    command = ["gcc", *FLAGS, *BUILDS[build], *sources, "-o", binary, "-lpthread"]
    built = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if built.returncode and build != "plain" and "sanitize" in built.stderr:
        pytest.skip("gcc has no %s sanitizer runtime here" % build)
    assert built.returncode == 0, built.stderr
    env = dict(
        os.environ,
        TSAN_OPTIONS="halt_on_error=1",
        ASAN_OPTIONS="detect_leaks=1",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
    )
    ran = subprocess.run([binary], capture_output=True, text=True, env=env, timeout=100)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip().endswith(" 0 failed")
