"""The optional clients the suites test (Keras, PyMC, Ray, scikit-learn) and the one way their tests skip.

A client's tests skip only where the client is not installed at all.  Where
it is installed, its tests import it and run: an import that fails (a broken
install, Keras on another backend) fails them instead of skipping, and
:mod:`skip_report` fails the run when an installed client's tests all skipped.
"""

import importlib.util
import os

import pytest

# Keras picks its backend at its first import and, on a machine without ~/.keras/keras.json, picks TensorFlow
# (and writes that file).  The suites set Theano's before anything can import Keras.
KERAS_BACKEND = "theano"

# module: (the client's name, the tests that need it, as paths from the checkout's root, "::test" prefixes allowed)
CLIENTS = {
    "keras": ("Keras 2.3.1", ("tests/cpu/test_keras.py",)),
    "ray": ("Ray", ("tests/cpu/test_ray.py",)),
    "sklearn": ("scikit-learn", ("tests/cpu/test_demo.py",)),
    "pymc3": ("PyMC3 3.9.3", ("tests/cpu/test_dequeue_pymc.py::test_pymc3",)),
    "pymc": ("PyMC", ("tests/pytensor/test_pymc.py", "tests/pytensor/test_pymc_example.py")),
}


def installed(module):
    """Whether ``module`` is installed, without importing it (an import may be what is broken).

    A folder of that name in the current directory (the checkout's ``build/``) is not a package.
    """
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.origin not in (None, "namespace")


def skip_unless_installed(module, hint):
    """Skips the calling test module where ``module`` is not installed; where it is, does nothing, so that
    the module's own import of it runs and fails loudly if the install is broken."""
    if not installed(module):
        name = CLIENTS[module][0] if module in CLIENTS else module
        pytest.skip("%s is not installed (%s)" % (name, hint), allow_module_level=True)


def set_keras_backend():
    """Keras's backend for the suite, before any import of Keras, whatever the environment said."""
    os.environ["KERAS_BACKEND"] = KERAS_BACKEND
