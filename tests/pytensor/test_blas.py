"""PyTensor's BLAS in a user's install (theano_queue/pytensor/blas.py): OpenBLAS where PyTensor's probe finds none.

A pip-installed PyMC on Debian's OpenBLAS warned "PyTensor could not link to a BLAS installation" and ran its
products on numpy's C API; the project's own venvs hid it with a pytensorrc that users never get.
"""

import os
import subprocess
import sys
import sysconfig
import warnings

import pytest
from pytensor.link.c.cmodule import try_blas_flag

import theano_queue
from theano_queue.pytensor.blas import probe_then_fall_back

SCRIPT = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import numpy as np, pytensor, pytensor.tensor as pt
    import theano_queue.pytensor as tq
    x, w = pt.matrix("x"), pt.vector("w")
    f = pytensor.function([x, w], x @ w, mode="CVM")
    f(np.ones((500, 20)), np.ones(20))
ops = sorted({type(node.op).__name__ for node in f.maker.fgraph.apply_nodes})
print(repr(pytensor.config.blas__ldflags), any("could not link to a BLAS" in str(w.message) for w in caught), ops)
"""


def fresh_python(path):
    """A venv's python that sees this venv's packages through a plain path entry, not its .pth files (no rc)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = os.path.join(path, "bin", "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(os.path.join(site, "over.pth"), "w") as f:
        # The package under test first (it may be a --target copy), then PyTensor's venv.
        package = os.path.dirname(os.path.dirname(theano_queue.__file__))
        f.write(package + "\n" + sysconfig.get_paths()["purelib"] + "\n")
    return python


def run(python, home, **flags):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PYTHONSAFEPATH": "1", **flags}
    out = subprocess.run([python, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600, cwd=home)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.timeout(900)
def test_a_users_install_links_pytensor_to_openblas_and_keeps_the_users_flags(tmp_path):
    if not try_blas_flag(["-lopenblas"]):
        pytest.skip("OpenBLAS cannot be linked here (Debian: apt-get install libopenblas-dev)")
    python = fresh_python(tmp_path / "venv")
    home = tmp_path / "home"  # no ~/.pytensorrc; the compile cache of its own
    home.mkdir()
    line = run(python, home)
    assert line.startswith("'-lopenblas' False"), line
    assert "CGemv" in line, line  # the product runs on BLAS
    # A value the user gives wins, even an empty one.
    assert run(python, home, PYTENSOR_FLAGS="blas__ldflags=").startswith("'' "), line


def test_the_fallback_comes_after_pytensors_probe_and_keeps_its_warning_when_nothing_links():
    def probe_finding(flags):
        def probe():
            if not flags:
                warnings.warn("PyTensor could not link to a BLAS installation", UserWarning)
            return flags

        return probe

    tried = []

    def links(flags):
        tried.append(flags)
        return " ".join(flags)

    assert probe_then_fall_back(probe_finding("-lmkl_rt"), links)() == "-lmkl_rt" and not tried
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert probe_then_fall_back(probe_finding(""), links)() == "-lopenblas"
    with pytest.warns(UserWarning, match="could not link to a BLAS"):
        assert probe_then_fall_back(probe_finding(""), lambda flags: "")() == ""
