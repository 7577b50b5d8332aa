"""PyTensor's BLAS where its own probe finds none: OpenBLAS, as the project's venvs configure it.

PyTensor's C linker links its BLAS Ops (``CGemv``, ``Gemm``) against
``pytensor.config.blas__ldflags``.  Left unset, PyTensor probes for MKL,
``libblas`` with ``libcblas``, or OpenBLAS with ``libgfortran`` and
``libgomp``; Debian's and Ubuntu's ``libopenblas-dev`` give none of these
sets, so a pip-installed PyMC warns "PyTensor could not link to a BLAS
installation" and runs its products on numpy's C API.  The project's venvs
write a ``pytensorrc`` with ``-lopenblas`` (``scripts/install-pytensor.sh``);
a user's install gets the same from :func:`fall_back_to_openblas`, which
``import theano_queue.pytensor`` runs:

* a value the user gave (``PYTENSOR_FLAGS``, ``~/.pytensorrc``,
  ``PYTENSORRC``) is used as given, and PyTensor's own probe still comes first;
* only when it finds nothing is ``-lopenblas`` tried, by PyTensor's own link
  test (``try_blas_flag``); PyTensor's warning stands when that fails too;
* nothing runs at import: the probe runs when PyTensor first asks for the
  flags, as it would without this.
"""

import warnings

#: Tried, in order, after PyTensor's probe found nothing.
FALLBACK_FLAGS = (["-lopenblas"],)


def probe_then_fall_back(probe, try_flags):
    """PyTensor's probe, then each of FALLBACK_FLAGS that links; PyTensor's warnings only when none does."""

    def blas_ldflags():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            flags = probe()
        for candidate in FALLBACK_FLAGS if not flags else ():
            flags = try_flags(candidate)
            if flags:
                break
        if not flags:
            for warning in caught:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        return flags

    blas_ldflags.falls_back = True
    return blas_ldflags


def fall_back_to_openblas():
    """Makes PyTensor's default ``blas__ldflags`` fall back to OpenBLAS; True when it now does."""
    import pytensor
    from pytensor.link.c.cmodule import try_blas_flag

    param = type(pytensor.config).__dict__.get("blas__ldflags")
    # PyTensor's lazily computed default (2.38 and 3.0 keep it as a ConfigParam's _default); anything else is left.
    probe = getattr(param, "_default", None)
    if not callable(probe):
        return False
    if not getattr(probe, "falls_back", False):
        param._default = probe_then_fall_back(probe, try_blas_flag)
    return True
