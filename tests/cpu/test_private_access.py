"""Modules of theano_queue/ keep out of each other's private attributes (issue 42, point 2).

One access counts when a module reads or writes ``x._name`` (x not ``self`` or ``cls``) where ``_name`` is a
private name that another module of the package defines and this one does not (an attribute set on ``self``, a
method or class attribute, a module-level name), or imports such a name (``from .feed.feeder import _Run``).
Names no module of the package defines (Keras's ``_keras_shape``, Theano's own) are other projects' protocols
and do not count, nor does the ``_engine`` extension module, the package's C face.  The few left each carry a
comment saying why; this test keeps their number from growing.

    python tests/cpu/test_private_access.py     # lists them
"""

import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "theano_queue")
#: At most this many accesses (issue 42 allows 5, each commented).
LIMIT = 5


def private(name):
    return name.startswith("_") and not name.startswith("__")


def modules():
    """{path relative to ROOT: parsed module} for every Python file of the package."""
    found = {}
    for where, _, names in os.walk(PACKAGE):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(where, name)
                with open(path) as f:
                    found[os.path.relpath(path, ROOT)] = ast.parse(f.read(), path)
    return found


def owned(tree):
    """The private names a module defines: attributes of self/cls, class members, module-level names."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    return {n for n in names if private(n)}


def accesses(trees):
    """[(path, line, text)] of every cross-module private access."""
    owners = {path: owned(tree) for path, tree in trees.items()}
    anyone = set().union(*owners.values())
    found = []
    for path, tree in trees.items():
        mine = owners[path]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                if node.attr in anyone and node.attr not in mine:
                    found.append((path, node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("theano_queue")):
                for alias in node.names:
                    if private(alias.name) and alias.name != "_engine":
                        where = "." * node.level + (node.module or "")
                        found.append((path, node.lineno, "from %s import %s" % (where, alias.name)))
    return sorted(found)


def test_the_counter_finds_what_it_should():
    trees = {
        "a.py": ast.parse("class A:\n    def __init__(self):\n        self._ring = 1\n    def _put(self): pass\n"),
        "b.py": ast.parse(
            "from .a import _helper\nfrom . import _engine\n"
            "def f(q, v):\n    v._keras_shape = 1\n    q._put()\n    return q._ring, q.__class__\n"
        ),
    }
    assert [text for _, _, text in accesses(trees)] == ["from .a import _helper", "q._put", "q._ring"]


def test_modules_reach_into_each_others_private_attributes_at_most_five_times():
    found = accesses(modules())
    listing = "\n".join("%s:%d: %s" % access for access in found)
    assert len(found) <= LIMIT, "%d cross-module private accesses (at most %d):\n%s" % (len(found), LIMIT, listing)


def test_each_access_left_says_why():
    """A comment that says "private" on the access's line or the three lines above it."""
    silent = []
    for path, line, text in accesses(modules()):
        with open(os.path.join(ROOT, path)) as f:
            lines = f.read().splitlines()
        if not any("#" in above and "private" in above.split("#", 1)[1] for above in lines[max(0, line - 4) : line]):
            silent.append("%s:%d: %s" % (path, line, text))
    assert not silent, "cross-module private accesses without a comment saying why:\n" + "\n".join(silent)


if __name__ == "__main__":
    found = accesses(modules())
    for access in found:
        print("%s:%d: %s" % access)
    print(len(found), "cross-module private accesses", file=sys.stderr)
