"""Where the C sources live: c_code/ beside the package (a checkout or an
editable install) or inside it (an installed wheel; setup.py copies it).

c_code/ has four folders: ops/ (the Ops' C files, compiled by the graph
library at run time), engine/ (the plain-C engine: core/ and its CUDA backend, cuda/), python/ (its CPython face
and tq_capi.h, the table the Ops call) and generated/ (the kernels' PTX)."""

import functools
import os

# The folders whose headers the Ops' C code includes: the engine's (tq_base.h) and the table (tq_capi.h).
HEADER_FOLDERS = ("engine/core", "python")


@functools.lru_cache(maxsize=None)
def c_code_dir():
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # theano_queue/, above core/
    for candidate in (os.path.join(package, "c_code"), os.path.join(os.path.dirname(package), "c_code")):
        if os.path.isfile(os.path.join(candidate, "python", "tq_capi.h")):
            return candidate
    raise ImportError("theano_queue: c_code/ not found beside or inside %s; reinstall the package" % package)


def op_file(name):
    """The path of one of the Ops' C files (``dequeue.c``, ``key_token.c``...), in c_code/ops/."""
    return os.path.join(c_code_dir(), "ops", name)


def header_dirs():
    """The folders to put on the Ops' include path, so that their ``#include "tq_capi.h"`` resolves."""
    return [os.path.join(c_code_dir(), folder) for folder in HEADER_FOLDERS]


def header_file(name):
    """The path of a header the Ops include (``tq_base.h``, ``tq_capi.h``), in whichever folder holds it."""
    for folder in header_dirs():
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError("theano_queue: header %r not found in %s" % (name, ", ".join(header_dirs())))
