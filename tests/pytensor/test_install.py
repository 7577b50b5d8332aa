"""`pip install` of the checkout, with no flag, into a fresh venv that has PyMC 5 and its PyTensor (.venv-pymc).

The fresh venv sees .venv-pymc's packages (a .pth file), as a user's PyMC venv
would hold them; pip builds the package in isolation (pyproject.toml) and
must neither ask for Theano nor move numpy or PyTensor, plainly or with the
``[pytensor]`` extra, nor take the engine the Theano venv built (numpy 1.23)
in the same checkout's build/.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

pytest.importorskip("pymc")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The Theano venv's python (numpy 1.23): make's .venv, or TQ_THEANO_PYTHON where the checkout has none.
THEANO_PYTHON = os.environ.get("TQ_THEANO_PYTHON", os.path.join(ROOT, ".venv", "bin", "python"))
SOURCES = ["setup.py", "setup.cfg", "pyproject.toml", "README.rst", "c_code", "theano_queue"]


def copy_sources(target):
    """The package's sources alone: a build in the checkout would share its build/ with the in-place engine."""
    os.makedirs(target)
    for name in SOURCES:
        source = os.path.join(ROOT, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(target, name), ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        else:
            shutil.copyfile(source, os.path.join(target, name))
    return target


def fresh_venv_over_this_one(path):
    """A venv of its own whose python also sees this venv's packages (PyMC, PyTensor, numpy 2)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = os.path.join(path, "bin", "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(os.path.join(site, "pymc_venv.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


def user_env():
    """The environment a user's shell would give: no PYTHONPATH (the test runner's may point at another copy)."""
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.timeout(900)  # pip fetches the build requirements (numpy 2) once
def test_plain_pip_install_into_a_pymc_venv_imports_both(tmp_path):
    source = copy_sources(str(tmp_path / "src"))
    python, site = fresh_venv_over_this_one(tmp_path / "venv")
    pip = [sys.executable, "-m", "pip", "--python", python]
    env = user_env()
    install = subprocess.run([*pip, "install", source], capture_output=True, text=True, env=env, timeout=900)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # Nothing but the package itself was installed: PyMC's numpy and PyTensor stay, no Theano came.
    installed = os.listdir(site)
    assert not [name for name in installed if name.lower().startswith(("theano-", "theano ", "numpy", "pytensor"))]
    assert any(name.startswith("theano_queue-") for name in installed), installed
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, env=env, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    # The command doc/pymc.rst gives PyMC users, theano_queue[pytensor]: its extra is met by PyMC's own
    # PyTensor (2.38.x), so pip would install the package alone, neither Theano nor another PyTensor or numpy.
    report = subprocess.run(
        [*pip, "install", "--dry-run", "--quiet", "--report", "-", source + "[pytensor]"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    planned = [item["metadata"]["name"].lower() for item in json.loads(report.stdout)["install"]]
    assert set(planned) <= {"theano_queue", "theano-queue"}, planned
    script = (
        "import sys, numpy as np, pymc, pytensor\n"
        "import theano_queue.pytensor as tq\n"
        "q = tq.Queue([('x', 'float64', (2,))])\n"
        "f = pytensor.function([], q.dequeue() * 2, mode='CVM')\n"
        "q.put(np.array([1.0, 2.0]))\n"
        "print(f().tolist(), tq.__file__.startswith(sys.prefix), 'theano' in sys.modules)\n"
    )
    out = subprocess.run(
        [python, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(env, PYTHONSAFEPATH="1"),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["[2.0,", "4.0]", "True", "False"]


FIT_SCRIPT = """
import numpy as np, pymc as pm
import theano_queue.pytensor as tq
rng = np.random.default_rng(0)
X = rng.normal(size=(400, 3)); y = (X @ [1.0, -2.0, 0.5] > 0).astype("int32")
q = tq.Queue([("x", "float64", (40, 3)), ("y", "int32", (40,))], capacity=4, timeout=60)
x_q, y_q = q.dequeue()
with pm.Model() as model:
    beta = pm.Normal("beta", 0, 1, shape=3)
    pm.Bernoulli("obs", logit_p=x_q @ beta, observed=y_q, total_size=len(X))
with tq.Feeder(q, (X, y), epochs=None, shuffle=True, seed=0):
    approx = pm.fit(30, model=model, progressbar=False)
print("fitted", len(approx.hist), bool(np.isfinite(approx.hist).all()), np.__version__.split(".")[0])
"""


@pytest.mark.timeout(1500)  # the Theano venv's build, then pip's isolated build
def test_install_from_a_checkout_whose_build_holds_the_theano_engine_imports_and_fits(tmp_path):
    """make demo builds the engine against numpy 1.23 in build/; pip install ".[pytensor]" packed it, and
    ``import theano_queue.pytensor`` under numpy 2 failed ("compiled using NumPy 1.x")."""
    if not os.path.exists(THEANO_PYTHON):
        pytest.skip("no Theano venv (numpy 1.23) at %s to build the other engine; set TQ_THEANO_PYTHON" % THEANO_PYTHON)
    source = copy_sources(str(tmp_path / "src"))
    env = user_env()
    # What make demo does in a checkout (the Makefile's engine target).
    demo = [THEANO_PYTHON, "-c", "import numpy; assert numpy.__version__.startswith('1.'), numpy.__version__"]
    assert subprocess.run(demo, env=env, timeout=60).returncode == 0, "TQ_THEANO_PYTHON is not a numpy-1 python"
    built = subprocess.run(
        [THEANO_PYTHON, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=source,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    python, _ = fresh_venv_over_this_one(tmp_path / "venv")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", source + "[pytensor]"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    out = subprocess.run(
        [python, "-c", FIT_SCRIPT],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(env, PYTHONSAFEPATH="1"),
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-4:] == ["fitted", "30", "True", "2"]
