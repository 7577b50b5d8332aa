"""Where the C sources live: c_code/ beside the package (a checkout or an
editable install) or inside it (an installed wheel; setup.py copies it)."""

import functools
import os


@functools.lru_cache(maxsize=None)
def c_code_dir():
    package = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(package, "c_code"), os.path.join(os.path.dirname(package), "c_code")):
        if os.path.isfile(os.path.join(candidate, "tq_capi.h")):
            return candidate
    raise ImportError("theano_queue: c_code/ not found beside or inside %s; reinstall the package" % package)
