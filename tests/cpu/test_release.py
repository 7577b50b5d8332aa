"""The release's check (scripts/check_wheel.py, run by make test after python -m build): a wheel that lacks
c_code/, the engine's stub or the engine is refused, naming what is missing."""

import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check_wheel.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import check_wheel  # noqa: E402


def release(folder, leave_out=(), engine=True):
    """A folder like python -m build's: an sdist and a wheel holding what the checkout needs, less ``leave_out``."""
    os.makedirs(folder)
    open(os.path.join(folder, "theano_queue-0.1.0.tar.gz"), "wb").close()
    with zipfile.ZipFile(os.path.join(folder, "theano_queue-0.1.0-cp311-cp311-linux_x86_64.whl"), "w") as z:
        for name in sorted(check_wheel.needed_files() - set(leave_out)):
            z.writestr(name, "")
        if engine:
            z.writestr("theano_queue/_engine.cpython-311-x86_64-linux-gnu.so", "")
    return folder


def check(folder):
    return subprocess.run([sys.executable, SCRIPT, str(folder)], capture_output=True, text=True, timeout=60)


def test_a_wheel_with_everything_passes(tmp_path):
    done = check(release(tmp_path / "dist"))
    assert done.returncode == 0, done.stderr
    assert "hold what an install needs" in done.stdout


def test_what_the_wheel_must_hold_comes_from_the_tree():
    needed = check_wheel.needed_files()
    for name in ("dequeue.c", "enqueue.c", "gpu_dequeue.c", "gpu_enqueue.c"):
        assert "theano_queue/c_code/ops/" + name in needed
    assert "theano_queue/c_code/engine/core/tq_base.h" in needed and "theano_queue/c_code/sources.txt" not in needed
    assert {"theano_queue/_engine.pyi", "theano_queue/__init__.py", "theano_queue/pytensor/__init__.py"} <= needed


@pytest.mark.parametrize(
    "leave_out, engine, named",
    [
        (["theano_queue/c_code/ops/dequeue.c"], True, "theano_queue/c_code/ops/dequeue.c"),
        (["theano_queue/c_code/engine/core/tq_base.h"], True, "theano_queue/c_code/engine/core/tq_base.h"),
        (["theano_queue/_engine.pyi"], True, "theano_queue/_engine.pyi"),
        ([], False, "the built engine"),
    ],
)
def test_a_wheel_that_lacks_a_file_is_refused_naming_it(tmp_path, leave_out, engine, named):
    done = check(release(tmp_path / "dist", leave_out, engine))
    assert done.returncode == 1
    assert named in done.stderr


def test_a_folder_without_exactly_one_wheel_and_sdist_is_refused(tmp_path):
    os.makedirs(tmp_path / "dist")
    done = check(tmp_path / "dist")
    assert done.returncode == 1 and "0 wheel(s) and 0 sdist(s)" in done.stderr
