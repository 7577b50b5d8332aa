"""What a spawn or forkserver worker is sent: the dataset, pickled by reference wherever a worker can import it.

Plain pickle names a class or function by its module and name, and the
worker imports it: a few bytes, and module globals (a memory map, a lock, a
connection) stay the worker's own.  Spawn and forkserver run the main script
again in each worker (as ``__mp_main__``, which they make ``__main__``), so
what a script defines at its top level is found there too (but for what it
defines under ``if __name__ == "__main__":``, which the worker skips: that
goes by value).  Only what no
worker can import (``python -c``, a notebook, a class defined in a function)
is sent by value with cloudpickle, and with it the globals it uses.

A read-only or read-write ``np.memmap`` (``np.load(..., mmap_mode="r")``)
is sent as its file name, offset, dtype and shape: the worker maps the same
file instead of receiving a copy of it.
"""

from __future__ import annotations

import ast
import functools
import inspect
import io
import os
import pickle
import sys
import types
from typing import Any, FrozenSet, Iterator, List, Optional, Tuple

import cloudpickle
import numpy as np


def main_script_path() -> Optional[str]:
    """The file spawn would run again in a worker as its main script; None when it runs none (``python -c``,
    a notebook, the interactive prompt)."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return None  # python -m: spawn imports the module by name
    return getattr(main, "__file__", None)


def main_imports_in_workers() -> bool:
    """Whether spawn and forkserver workers import the main module again, so that its names resolve there."""
    main = sys.modules.get("__main__")
    if main is None:
        return False
    if getattr(main, "__spec__", None) is not None:
        return True
    path = main_script_path()
    return path is not None and os.path.isfile(path)


def refuse_unimportable_main(start_method: str, where: str) -> None:
    """spawn and forkserver run the main script again in each worker: one read from standard input cannot be."""
    path = main_script_path()
    if path is not None and not os.path.isfile(path):
        raise RuntimeError(
            "%s: start_method=%r runs the main script again in each worker, but this one is %r (read from "
            "standard input, as with 'python -', or deleted): a worker cannot read it again. Save the script "
            "to a file and run that, or give start_method='fork' where this process has no CUDA context or "
            "threads" % (where, start_method, path)
        )


def _resolves(obj: Any) -> bool:
    """Whether ``obj`` (a class or function of ``__main__``) is found under its own qualified name there, and
    will be in a worker: not defined under ``if __name__ == "__main__":``, which the worker's import skips."""
    found: Any = sys.modules.get("__main__")
    for part in getattr(obj, "__qualname__", "<locals>").split("."):
        if part == "<locals>":
            return False
        found = getattr(found, part, None)
    return found is obj and not _under_guard(obj) and not _uses_guarded_globals(obj)


@functools.lru_cache(maxsize=4)
def _guards(path: str) -> Tuple[Tuple[Tuple[int, int], ...], FrozenSet[str]]:
    """The top-level ``if`` blocks of the script at ``path`` that test ``__name__``: their line ranges, and
    the module globals they bind (a worker's import of the script leaves those unbound, or as first set)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return (), frozenset()
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test))
    ]
    names = set()
    for block in blocks:
        for node in ast.walk(block):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Global):
                names.update(node.names)
    return tuple((b.lineno, b.end_lineno or b.lineno) for b in blocks), frozenset(names)


def _guarded_lines(path: str) -> Tuple[Tuple[int, int], ...]:
    return _guards(path)[0]


def _functions(obj: Any) -> List[types.FunctionType]:
    """A function itself, or a class's functions (its own, not its bases')."""
    if isinstance(obj, types.FunctionType):
        return [obj]
    found = [getattr(v, "__func__", v) for v in vars(obj).values()]
    return [f for f in found if isinstance(f, types.FunctionType)]


def _uses_guarded_globals(obj: Any) -> bool:
    """Whether ``obj``'s code reads a global the script binds under its guard: the worker's would differ, so
    it goes by value, with the parent's values (a dataset that needs them holds them, in effect)."""
    path = main_script_path()
    names = _guards(path)[1] if path else frozenset()
    return bool(names) and any(names.intersection(f.__code__.co_names) for f in _functions(obj))


def _first_line(obj: Any) -> Optional[int]:
    """Where a function, or a class (through its first function, else its source), is defined."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        return code.co_firstlineno
    for value in vars(obj).values():
        value = getattr(value, "__func__", value)
        if isinstance(value, types.FunctionType):
            return value.__code__.co_firstlineno
    try:
        return inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return None


def _under_guard(obj: Any) -> bool:
    path = main_script_path()
    if path is None:
        return False
    line = _first_line(obj)
    return line is not None and any(start <= line <= end for start, end in _guarded_lines(path))


def _reopen_memmap(filename, dtype, mode, offset, shape, order):
    return np.memmap(filename, dtype=dtype, mode=mode, offset=offset, shape=shape, order=order)


def _memmap_reduce(obj: np.memmap) -> Optional[tuple]:
    """A memmap over a whole mapping of a file (not a view of one), read-only or shared: reopened by name."""
    mapping = getattr(obj, "_mmap", None)
    if mapping is None or obj.base is not mapping or obj.mode not in ("r", "r+") or not obj.filename:
        return None
    order = "F" if obj.flags.f_contiguous and not obj.flags.c_contiguous else "C"
    return _reopen_memmap, (obj.filename, obj.dtype, obj.mode, obj.offset, obj.shape, order)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, but by reference for what ``__main__`` defines at its top level when workers import it."""

    def __init__(self, file, main_by_reference: bool):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.main_by_reference = main_by_reference

    def reducer_override(self, obj):
        if isinstance(obj, np.memmap):
            reduced = _memmap_reduce(obj)
            if reduced is not None:
                return reduced
        if (
            self.main_by_reference
            and isinstance(obj, (type, types.FunctionType))
            and getattr(obj, "__module__", None) == "__main__"
            and _resolves(obj)
        ):
            return NotImplemented  # plain pickle's reference: __main__.Name, found in the worker's __main__
        return super().reducer_override(obj)


def dumps(obj: Any, main_by_reference: bool) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, main_by_reference).dump(obj)
    return buffer.getvalue()


def _by_value(cls: type, main_by_reference: bool) -> bool:
    module = getattr(cls, "__module__", None)
    if module == "__main__":
        return not (main_by_reference and _resolves(cls))
    return module not in sys.modules or "<locals>" in cls.__qualname__


def _parts(dataset: Any, main_by_reference: bool) -> Iterator[Tuple[str, Any]]:
    """(what it is, the object) for each part of the dataset a pickle takes along: its attributes, and for
    a class sent by value the globals its functions use."""
    for name, value in sorted(getattr(dataset, "__dict__", {}).items()):
        yield "the dataset's attribute %r (a %s)" % (name, type(value).__name__), value
    for cls in type(dataset).__mro__:
        if cls is object or not _by_value(cls, main_by_reference):
            continue
        for attr, function in vars(cls).items():
            function = getattr(function, "__func__", function)
            if not isinstance(function, types.FunctionType):
                continue
            for name in function.__code__.co_names:
                if name in function.__globals__ and not isinstance(function.__globals__[name], types.ModuleType):
                    value = function.__globals__[name]
                    yield (
                        (
                            "the global %r (a %s) of module %s, which %s.%s uses: %s cannot be imported in a worker "
                            "(a script run with python -c, a notebook, or a class defined in a function), so it "
                            "is sent by value with the globals it uses"
                            % (name, type(value).__name__, cls.__module__, cls.__qualname__, attr, cls.__qualname__)
                        ),
                        value,
                    )


def culprit(dataset: Any, main_by_reference: bool) -> Optional[str]:
    """What part of ``dataset`` does not pickle, in words; None when no single part is to blame."""
    for what, value in _parts(dataset, main_by_reference):
        try:
            dumps(value, main_by_reference)
        except Exception:  # noqa: BLE001  (whatever pickling raises: this is the part)
            return what
    return None
