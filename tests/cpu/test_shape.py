"""The shape of the code (issue 20): no circle of includes in the C tree, the CPython face and the CUDA backend
calling only downward (in the order their headers list), no circle of imports in the package or in bench/, and
files of a size one can read: no C file over 700 lines (the generated PTX header aside), no Python file over 600."""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATED = {"c_code/generated/tq_strided_ptx.h", "c_code/generated/tq_gather_rows_ptx.h"}
# c_code/'s folders (README.rst, "Layout"); a file is named by its base name in #include and in these lists.
C_FOLDERS = ("c_code/ops", "c_code/engine/core", "c_code/engine/cuda", "c_code/python", "c_code/generated")


def files(*folders, ends=()):
    for folder in folders:
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(ends):
                yield folder + "/" + name


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def find_circle(graph):
    """One circle of the directed graph {node: set of nodes} as a list of nodes, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def test_the_circle_finder_finds_circles():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_c_file_over_700_lines():
    long = {}
    for path in files(*C_FOLDERS, "tests/c", ends=(".c", ".h", ".cu")):
        lines = read(path).count("\n")
        if path not in GENERATED and lines > 700:
            long[path] = lines
    assert not long


def test_no_python_file_over_600_lines():
    long = {}
    for folder in ("theano_queue", "tests", "bench", "examples", "scripts", "doc"):
        for where, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in names:
                if name.endswith((".py", ".pyi")):
                    path = os.path.relpath(os.path.join(where, name), ROOT)
                    lines = read(path).count("\n")
                    if lines > 600:
                        long[path] = lines
    for path in files(".", ends=(".py",)):  # setup.py
        lines = read(path).count("\n")
        if lines > 600:
            long[os.path.normpath(path)] = lines
    assert not long


def test_no_circle_of_includes():
    graph = {}
    for path in files(*C_FOLDERS, "tests/c", ends=(".c", ".h", ".cu")):
        graph[os.path.basename(path)] = set(re.findall(r'^\s*#\s*include\s+"([^"]+)"', read(path), re.M))
    assert find_circle(graph) is None


def c_file(name):
    """The path of one of c_code/'s files, by base name, in whichever folder holds it."""
    (path,) = [folder + "/" + name for folder in C_FOLDERS if os.path.isfile(os.path.join(ROOT, folder, name))]
    return path


def layers(header):
    """The files a header lists in calling order ("calls only the files listed below it") and the functions each
    defines, from the header's "/* ---- file.c ---- */" sections (tq_py.h, tq_cuda_backend.h)."""
    text = read(c_file(header))
    order = list(dict.fromkeys(re.findall(r"^ \*   (tq_\w+\.c) ", text, re.M)))  # the list's own lines
    defined = {}
    for name, section in re.findall(r"/\* ---- (tq_\w+\.c)[^\n]*---- \*/\n(.*?)(?=/\* ---- |#endif)", text, re.S):
        declared = re.findall(r"^[^\s/*#][^;(]*?\b(\w+)\(", section, re.M)
        defined.setdefault(name, set()).update(declared)
    return order, defined


@pytest.mark.parametrize("header", ["tq_py.h", "tq_cuda_backend.h"])
def test_each_file_calls_only_the_files_below_it(header):
    order, defined = layers(header)
    assert len(order) >= 6 and set(defined) <= set(order), (order, sorted(defined))
    upward = []
    for position, caller in enumerate(order):
        code = re.sub(r"/\*.*?\*/", "", read(c_file(caller)), flags=re.S)
        for callee in order[: position + 1]:
            if callee == caller:
                continue
            for function in defined.get(callee, ()):
                if re.search(r"\b%s\(" % function, code):
                    upward.append("%s calls %s (%s), listed above it" % (caller, function, callee))
    assert not upward


def imports_of(folder, package):
    """{module: modules of `package` it imports, anywhere in it} for the modules of folder and its subfolders."""
    graph = {}
    for root, _, names in sorted(os.walk(os.path.join(ROOT, folder))):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.relpath(os.path.join(root, name), ROOT)
            module = package + "." + os.path.relpath(path, folder)[:-3].replace(os.sep, ".")
            is_package = module.endswith(".__init__")
            module = module[: -len(".__init__")] if is_package else module
            here = module if is_package else module.rsplit(".", 1)[0]
            found = set()
            for node in ast.walk(ast.parse(read(path))):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:  # relative: from this module's package, or the ones above it
                        parent = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1])
                        base = parent + ("." + base if base else "")
                    found.update(base + "." + alias.name for alias in node.names)
                    # "from . import protocol" imports the module protocol, not its package (which is being
                    # imported already); "from .core import Queue" runs core's __init__.
                    found.add(base if node.module else (base, tuple(a.name for a in node.names)))
            graph[module] = found
    modules = set(graph)

    def imported(name):
        if isinstance(name, tuple):  # from . import a, b: the package itself only for a name that is no module
            base, names = name
            return base if any(base + "." + n not in modules for n in names) else None
        return name

    return {
        module: {n for n in map(imported, names) if n in modules and n != module and n.startswith(package + ".")}
        for module, names in graph.items()
    }


@pytest.mark.parametrize("folder", ["theano_queue", "bench"])
def test_no_circle_of_imports(folder):
    graph = imports_of(folder, folder)
    assert len(graph) > 5 and any(graph.values())  # the graph was read
    assert find_circle(graph) is None
