"""README.rst's Layout section is the map of the tree (issue 29): every file under c_code/ is named under its
folder's entry, every test folder has an entry, and every path and C file named there exists.  A file added at
the wrong place (a C file straight in c_code/, a test straight in tests/) fails here."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
C_NAME = re.compile(r"``([\w.-]+\.(?:c|h|cu))``")


def layout_entries():
    """{term: description} of the Layout section's definition list; a term line may name several paths."""
    with open(os.path.join(ROOT, "README.rst")) as f:
        text = f.read()
    section = re.search(r"^Layout\n-+\n(.*?)(?=^\S[^\n]*\n[-=~]{3,}\n|\Z)", text, re.M | re.S)
    assert section, "README.rst has no Layout section"
    entries, term = {}, None
    for line in section.group(1).splitlines():
        if line.startswith("``"):
            term = line.strip()
            entries[term] = ""
        elif term is not None and line.strip():
            entries[term] += " " + line.strip()
    return entries


def paths_of(term):
    return re.findall(r"``([^`]+)``", term)


def described(path):
    """The description of the entry whose term names ``path``."""
    for term, description in layout_entries().items():
        if path in paths_of(term):
            return description
    return None


def c_folders():
    """c_code/'s folders that hold files (engine/ holds two: core/ and cuda/), as paths under c_code/."""
    base = os.path.join(ROOT, "c_code")
    return sorted(
        os.path.relpath(folder, base)
        for folder, _, names in os.walk(base)
        if folder != base and any(os.path.isfile(os.path.join(folder, name)) for name in names)
    )


def test_the_layout_section_is_found_and_parsed():
    entries = layout_entries()
    assert len(entries) >= 10
    assert "dequeue.c" in C_NAME.findall(described("c_code/ops/"))


def test_c_code_holds_only_its_folders_and_the_source_list():
    loose = [
        name
        for name in os.listdir(os.path.join(ROOT, "c_code"))
        if not os.path.isdir(os.path.join(ROOT, "c_code", name))
    ]
    assert loose == ["sources.txt"], "files straight in c_code/ belong in one of its folders: %s" % loose
    assert c_folders() == ["engine/core", "engine/cuda", "generated", "ops", "python"]
    assert described("c_code/sources.txt") is not None


def test_every_file_under_c_code_is_named_under_its_folder():
    unnamed = []
    for folder in c_folders():
        description = described("c_code/%s/" % folder)
        assert description is not None, "README.rst's Layout has no entry for c_code/%s/" % folder
        names = set(C_NAME.findall(description))
        files = sorted(os.listdir(os.path.join(ROOT, "c_code", folder)))
        unnamed += ["c_code/%s/%s" % (folder, name) for name in files if name not in names]
    assert not unnamed, "not named in README.rst's Layout: %s" % sorted(unnamed)


def test_every_c_file_named_under_a_folder_is_there():
    missing = []
    for folder in c_folders():
        for name in C_NAME.findall(described("c_code/%s/" % folder) or ""):
            if not os.path.isfile(os.path.join(ROOT, "c_code", folder, name)):
                missing.append("c_code/%s/%s" % (folder, name))
    assert not missing, "README.rst's Layout names files that are not there: %s" % missing


def test_every_test_folder_has_an_entry_and_no_test_lies_outside_them():
    tests = os.path.join(ROOT, "tests")
    folders = sorted(name for name in os.listdir(tests) if os.path.isdir(os.path.join(tests, name)))
    folders = [name for name in folders if not name.startswith((".", "__"))]
    assert {"cpu", "standin", "gpu", "support", "c", "pytensor"} <= set(folders)
    without = [name for name in folders if described("tests/%s/" % name) is None]
    assert not without, "test folders without an entry in README.rst's Layout: %s" % without
    loose = [name for name in os.listdir(tests) if name.endswith(".py") and name != "conftest.py"]
    assert not loose, "test modules straight in tests/ belong in cpu/, standin/, gpu/ or support/: %s" % loose


def test_every_path_the_layout_names_exists():
    missing = [
        path for term in layout_entries() for path in paths_of(term) if not os.path.exists(os.path.join(ROOT, path))
    ]
    assert not missing, "README.rst's Layout names paths that are not there: %s" % missing


def test_every_test_in_tests_gpu_is_marked_gpu():
    folder = os.path.join(ROOT, "tests", "gpu")
    unmarked = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name)) as f:
                if not re.search(r"^pytestmark = pytest\.mark\.gpu$", f.read(), re.M):
                    unmarked.append(name)
    assert not unmarked, "tests/gpu/ files without pytestmark = pytest.mark.gpu: %s" % unmarked


def test_every_package_folder_names_its_files_in_its_init_docstring():
    # feed/'s map is its own helper's (issue 42.3); the folders of issue 42.1 are checked here.
    unnamed = []
    for folder in (
        "theano_queue",
        "theano_queue/core",
        "theano_queue/graph",
        "theano_queue/tools",
        "theano_queue/clients",
        "theano_queue/pytensor",
    ):
        path = os.path.join(ROOT, folder)
        with open(os.path.join(path, "__init__.py")) as f:
            docstring = ast.get_docstring(ast.parse(f.read())) or ""
        for name in sorted(os.listdir(path)):
            is_module = name.endswith((".py", ".pyi")) and name != "__init__.py"
            is_package = os.path.isfile(os.path.join(path, name, "__init__.py"))
            if (is_module and "``%s``" % name not in docstring) or (is_package and "``%s/``" % name not in docstring):
                unnamed.append("%s/%s" % (folder, name))
    assert not unnamed, "not named in their folder's __init__.py docstring: %s" % unnamed
