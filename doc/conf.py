"""Sphinx configuration of theano_queue's documentation.

Build it with ``make doc`` or::

    THEANO_FLAGS=floatX=float32,blas.ldflags=-lopenblas \
        .venv/bin/python -m sphinx -W --keep-going -b html doc doc/_build/html

Autodoc imports the package, which imports Theano: no GPU is needed.
"""
import os
import re
import sys

# Before anything imports Theano: its BLAS probe crashes on numpy 1.23 unless
# blas.ldflags is set, and the documentation is built on the CPU.
os.environ.setdefault("THEANO_FLAGS", "floatX=float32,blas.ldflags=-lopenblas")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the checkout, with the engine built in place (make doc does it)


def _version():
    with open(os.path.join(ROOT, "theano_queue", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


project = "theano_queue"
author = "the theano_queue authors"
copyright = "the theano_queue authors"
release = _version()
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

# theano_queue.gpu (GpuDequeue, GpuEnqueue) needs pygpu and libgpuarray; it is
# described by hand in api.rst and design.rst, not imported, so the pages build
# on a machine without them.  No module documented here imports pygpu.
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"exclude-members": "__init__, __new__"}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

master_doc = "index"
exclude_patterns = ["_build"]
templates_path = []
pygments_style = "sphinx"

html_theme = "alabaster"
html_static_path = ["_static"]
html_title = "theano_queue %s" % release
html_theme_options = {
    "description": "Graph-level queues for Theano",
    "fixed_sidebar": True,
}
