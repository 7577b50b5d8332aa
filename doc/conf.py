"""Sphinx configuration of theano_queue's documentation.

Build it with ``make doc`` or::

    THEANO_FLAGS=floatX=float32,blas.ldflags=-lopenblas \
        .venv/bin/python -m sphinx -W --keep-going -b html doc doc/_build/html

Autodoc imports the package, which imports Theano: no GPU is needed.
"""

import inspect
import json
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
    "sphinx.ext.doctest",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

# theano_queue.graph.theano_gpu (GpuDequeue, GpuEnqueue) needs pygpu and libgpuarray; it is
# described by hand in api.rst and design.rst, not imported, so the pages build
# on a machine without them.  No module documented here imports pygpu.
autodoc_member_order = "bysource"
autodoc_typehints = "none"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

# The figures the guides quote, by name (|gpu_dequeue_us|, ...), rendered from the benchmarks' results as
# doc/benchmarks.rst is (bench/report.py's QUOTED): a guide never holds a figure of its own.
with open(os.path.join(HERE, "bench", "results.json")) as _results:
    from bench.report import substitutions

    rst_epilog = substitutions(json.load(_results))

master_doc = "index"
exclude_patterns = ["_build", "bench"]  # bench/notes.rst is pasted into benchmarks.rst by bench/report.py
templates_path = []
pygments_style = "sphinx"

html_theme = "alabaster"
html_static_path = ["_static"]
html_title = "theano_queue %s" % release
html_theme_options = {
    "description": "Graph-level queues for Theano",
    "fixed_sidebar": True,
}


def _keep_property_summaries(app, what, name, obj, options, lines):
    """Napoleon reads "text: more text" on the first line of a property's
    docstring as "type: description".  The package's properties start with a
    summary that may hold a colon: where napoleon made a type of it, put the
    docstring back as written (no property here has napoleon sections)."""
    if what not in ("attribute", "property"):
        return
    types = [line[len(":type: ") :] for line in lines if line.startswith(":type: ")]
    doc = inspect.getdoc(obj) or ""
    if len(types) == 1 and doc.startswith(types[0] + ":"):
        lines[:] = doc.splitlines() + [""]


def setup(app):
    # After napoleon's own handler (priority 500).
    app.connect("autodoc-process-docstring", _keep_property_summaries, priority=600)
