"""Test set-up: float32 as Theano's default float (before Theano is imported;
the venv supplies blas.ldflags), the suite's own Theano compile directory,
timeouts scaled to the machine's load, and the ``gpu`` marker, skipped unless
Theano runs on a CUDA device.  The tests are in folders by what they need:
``cpu/`` (nothing but the CPU), ``standin/`` (the stand-in CUDA driver,
built with gcc), ``gpu/`` (a real GPU: every test there is marked ``gpu``);
``support/`` holds the modules they share.

* **Compile directory.**  Theano's compile lock lives in its compile
  directory; shared with other Theano processes on the machine (another
  checkout's suite, a training run), one of them may remove the lock file
  under another (``FileNotFoundError``).  Unless ``THEANO_FLAGS`` names a
  ``base_compiledir``, the suite uses ``build/theano-compiledir`` of this
  checkout (kept between runs: compiled code is reused).
* **Time scale.**  ``TQ_TEST_TIME_SCALE`` (a factor >= 1) stretches every
  subprocess timeout, pytest-timeout's per-test limit and the few bounds in
  seconds the tests assert (:mod:`timing`).  Unset, it is the load average
  per core when the run starts, at least 1: a run on a machine shared with
  others waits longer instead of failing.  Subprocesses inherit it.
* **Clients.**  Keras's backend is Theano's, set before any test imports
  Keras (on a machine without ``~/.keras/keras.json`` Keras picks
  TensorFlow).  An installed client (:mod:`clients`) whose tests all skip
  fails the run, and the run ends with its skips counted by reason
  (:mod:`skip_report`).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The helper modules (tests/support/) import by name from every test folder (cpu/, standin/, gpu/).  Spawned
# workers get this path too: multiprocessing hands the parent's sys.path to the child before it unpickles.
SUPPORT = os.path.join(ROOT, "tests", "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)


def _theano_flags(flags: str) -> str:
    names = {f.split("=", 1)[0].strip() for f in flags.split(",") if f.strip()}
    if "base_compiledir" not in names and "compiledir" not in names:
        flags = ",".join(f for f in (flags, "base_compiledir=" + os.path.join(ROOT, "build", "theano-compiledir")) if f)
    return flags


def _load_scale() -> float:
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        per_core = 1.0
    return round(max(1.0, per_core), 1)


os.environ["THEANO_FLAGS"] = _theano_flags(os.environ.get("THEANO_FLAGS", "floatX=float32"))
os.environ.setdefault("TQ_TEST_TIME_SCALE", str(_load_scale()))

import pytest  # noqa: E402
from clients import set_keras_backend  # noqa: E402
from skip_report import pytest_sessionfinish, pytest_terminal_summary  # noqa: E402, F401  (the plugin's hooks)
from timing import SCALE  # noqa: E402

set_keras_backend()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """pytest-timeout's limit (setup.cfg's, unless given on the command line or PYTEST_TIMEOUT) times the scale."""
    if getattr(config.option, "timeout", None) is None and "PYTEST_TIMEOUT" not in os.environ:
        try:
            ini = config.getini("timeout")
        except ValueError:  # pytest-timeout is not installed
            ini = None
        if ini:
            config.option.timeout = float(ini) * SCALE


# The PyTensor suite runs in its own venv with its own config (make test-pytensor).
collect_ignore = ["pytensor"]


def theano_gpu_available():
    from theano_queue.core.target import theano_gpu_contexts

    return bool(theano_gpu_contexts())


def pytest_collection_modifyitems(config, items):
    gpu_marked = [item for item in items if "gpu" in item.keywords]
    if not gpu_marked or theano_gpu_available():
        return
    skip = pytest.mark.skip(reason="needs Theano on a CUDA GPU (THEANO_FLAGS=device=cuda0)")
    for item in gpu_marked:
        item.add_marker(skip)
