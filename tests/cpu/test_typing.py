"""The engine's boundary is typed: theano_queue/_engine.pyi names exactly what the extension has, and mypy
(configured in setup.cfg, run by `make lint`) passes on the package."""

import ast
import importlib.util
import os
import subprocess
import sys

import pytest

from theano_queue import _engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALIASES = {"ComponentSpec", "DeviceSource", "Timeout"}  # the stub's own type aliases


def stub_names():
    """{None: module names, class name: its members} declared by the stub."""
    with open(os.path.join(ROOT, "theano_queue", "_engine.pyi")) as f:
        tree = ast.parse(f.read())

    def declared(body):
        names = set()
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.AnnAssign):
                names.add(node.target.id)
            elif isinstance(node, ast.Assign):
                names.update(target.id for target in node.targets)
        return names

    found = {None: declared(tree.body) - ALIASES}
    found.update({node.name: declared(node.body) for node in tree.body if isinstance(node, ast.ClassDef)})
    return found


def public(obj):
    return {name for name in dir(obj) if not name.startswith("__")}


def test_the_stub_names_what_the_extension_has():
    declared = stub_names()
    assert declared[None] == public(_engine)
    for cls in ("Ring", "Stop"):
        assert declared[cls] - {"__init__"} == public(getattr(_engine, cls)), cls


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (setup.py's test extras)")
def test_mypy_passes_on_the_package(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
