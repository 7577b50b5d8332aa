"""PyTensor suite set-up: each test that compiles runs under both linkers.

``mode`` is the ``mode`` argument of ``pytensor.function``: ``c`` (PyTensor's
"CVM" mode) compiles the Ops' C code, ``numba`` ("NUMBA", the installed
PyTensor's default) runs their ``perform`` in Numba's object mode.
"""

import os
import sys

import pytest

# The Theano suite's skip report and installed-client check (tests/support/skip_report.py): PyMC's tests must run
# where PyMC is installed.  Appended, so that nothing there shadows a module of this suite.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from skip_report import pytest_sessionfinish, pytest_terminal_summary  # noqa: E402, F401  (the plugin's hooks)

pytensor = pytest.importorskip("pytensor")

import theano_queue  # noqa: E402

if os.path.dirname(os.path.dirname(os.path.abspath(theano_queue.__file__))) == os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
):
    raise RuntimeError(
        "tests/pytensor imported the checkout's theano_queue (its engine is built for the Theano venv's numpy); "
        "run `make test-pytensor`, which installs the package into .venv-pytensor and runs with PYTHONSAFEPATH=1"
    )

MODES = {"c": "CVM", "numba": "NUMBA"}


@pytest.fixture(params=sorted(MODES))
def mode(request):
    """A compile mode for each PyTensor linker the queue serves."""
    return pytensor.compile.mode.get_mode(MODES[request.param])
