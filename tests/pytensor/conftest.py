"""PyTensor suite set-up: each test that compiles runs under both linkers.

``mode`` is the ``mode`` argument of ``pytensor.function``: ``c`` (PyTensor's
"CVM" mode) compiles the Ops' C code, ``numba`` ("NUMBA", the installed
PyTensor's default) runs their ``perform`` in Numba's object mode.
"""

import os

import pytest

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
