#!/usr/bin/env bash
# Makes the PyMC3 venv (default .venv-pymc3): PyMC3 3.9.3, the last PyMC3 on
# plain Theano, beside Theano 1.0.5 and numpy 1.23.5 (the Theano venv's pins,
# scripts/install-deps.sh) on Debian's Python 3.11, with the versions of its
# dependencies that have wheels for both.  Not part of `make test`:
# tests/cpu/test_dequeue_pymc.py runs its PyMC3 fits where pymc3 imports.
# PyMC3 3.9.3 needs two shims on numpy 1.23 and Python 3.11 (doc/pymc.rst):
# examples/pymc3_advi.py's shim_pymc3, which the test applies too.
set -euo pipefail
venv="${1:-.venv-pymc3}"
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade "pip>=23" "setuptools>=65,<81" wheel
# One command, so that nothing moves numpy off 1.23.5: arviz 0.11 is the last
# that PyMC3 3.9's arviz.from_pymc3 matches; xarray, pandas and scipy capped
# at releases that still take numpy 1.23.
"$venv/bin/python" -m pip install -q numpy==1.23.5 theano==1.0.5 pymc3==3.9.3 arviz==0.11.0 \
  "scipy>=1.9,<1.12" "pandas>=1.5,<2.2" "xarray>=2022.6,<2023.9" "matplotlib>=3.6,<3.9" "netcdf4<1.7" \
  "h5py<3.12" "patsy>=0.5.1" "fastprogress>=0.2" tqdm cloudpickle "pytest>=7" "pytest-timeout>=2"
# theano_queue itself, built in place against this numpy (the Theano venv's too).
"$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
# Theano's BLAS setting and the scan module it cannot build on Python 3.11: as scripts/install-deps.sh.
venv_abs="$(cd "$venv" && pwd)"
printf '[blas]\nldflags = -lopenblas\n' >"$venv_abs/theanorc"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cat >"$site/theano_queue_venv.pth" <<'PTH'
import os, sys; _rc = os.path.join(sys.prefix, "theanorc"); _have = os.environ.get("THEANORC", "~/.theanorc"); os.environ["THEANORC"] = _have if _rc in _have.split(os.pathsep) else os.pathsep.join([_rc, _have])
import sys; sys.version_info >= (3, 11) and sys.modules.setdefault("theano.scan_module.scan_perform_ext", None)
PTH
