"""The package's shape: every module imports, no circle of imports, no file over 600 lines, feeding without theano."""

import ast
import importlib
import os
import pkgutil
import subprocess
import sys

from timing import scaled

import theano_queue

PACKAGE = os.path.dirname(theano_queue.__file__)
ROOT = os.path.dirname(PACKAGE)


def modules():
    """Every module of theano_queue, by dotted name, with its file (the .py sources; not the engine)."""
    found = {"theano_queue": os.path.join(PACKAGE, "__init__.py")}
    for info in pkgutil.walk_packages([PACKAGE], "theano_queue."):
        path = os.path.join(ROOT, *info.name.split("."))
        path = os.path.join(path, "__init__.py") if info.ispkg else path + ".py"
        if os.path.exists(path) and not info.name.endswith("__main__"):
            found[info.name] = path
    return found


def imported(name, path, top_level_only):
    """The theano_queue modules ``name`` imports (at module level only, or anywhere in it)."""
    tree = ast.parse(open(path).read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # module level includes what runs at import inside if/try blocks
        nodes = [
            n
            for stmt in tree.body
            for n in ast.walk(stmt)
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("theano_queue"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if not base.startswith("theano_queue"):
                continue
            out.add(base)
            out.update(base + "." + a.name for a in node.names)  # `from . import x` imports a module
    return out


def graph(top_level_only):
    names = modules()
    return {
        name: {m for m in imported(name, path, top_level_only) if m in names and m != name}
        for name, path in names.items()
    }


def cycle(edges):
    """One circle in ``edges`` (a list of module names), or None.  A package's __init__ importing its own
    submodules is how packages work, not a circle: edges from a module up to its package are left out."""
    edges = {a: {b for b in bs if not a.startswith(b + ".")} for a, bs in edges.items()}
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_every_module_imports():
    for name in modules():
        # PyTensor's front end and PyMC's client need PyTensor, another venv (tests/pytensor/)
        if not name.startswith(("theano_queue.pytensor", "theano_queue.graph.pytensor", "theano_queue.clients.pymc")):
            importlib.import_module(name)


def test_no_circle_of_imports_inside_the_package():
    assert cycle(graph(top_level_only=True)) is None


def test_the_feed_package_has_no_circle_even_through_deferred_imports():
    edges = {
        a: {b for b in bs if b.startswith("theano_queue.feed")}
        for a, bs in graph(top_level_only=False).items()
        if a.startswith("theano_queue.feed")
    }
    assert cycle(edges) is None


def test_no_python_file_over_600_lines():
    long = {name: n for name, path in modules().items() if (n := len(open(path).read().splitlines())) > 600}
    assert not long


def test_feeding_imports_no_theano():
    # Compared with what the interpreter holds before (the venv's start-up may register a theano extension).
    code = (
        "import sys; before = set(sys.modules); "
        "import theano_queue.feed, theano_queue.core.queue, theano_queue.sampler, theano_queue.feed.child; "
        "print([m for m in set(sys.modules) - before if m == 'theano' or m.startswith('theano.')])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_old_module_paths_still_import():
    from theano_queue.feeder import Feeder
    from theano_queue.graph.theano import Dequeue
    from theano_queue.graph.theano import Dequeue as moved
    from theano_queue.workers import worker_info

    assert Feeder is theano_queue.Feeder and worker_info is theano_queue.worker_info and Dequeue is moved
