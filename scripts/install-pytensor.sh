#!/usr/bin/env bash
# Makes a PyTensor venv: Debian's Python 3.11, numpy 2, Numba, the test tools
# and the PyTensor of $PYTENSOR_REQUIREMENTS: by default PyTensor 3.0.x (the
# last series for Python 3.11), in .venv-pytensor; scripts/install-pymc.sh
# gives PyMC 5.28.5 and the PyTensor 2.38.x it pins instead.  theano_queue
# itself is installed into it separately (the Makefile's wheel, built against
# this numpy), so that this venv and the Theano venv (numpy 1.23.5, the engine
# built in place) never rebuild each other's extension.  Safe to run again.
set -euo pipefail
venv="${1:-.venv-pytensor}"
# PyTensor 3.1+ needs Python >= 3.12; 3.0.x requires numpy >= 2 and Numba.
requirements="${PYTENSOR_REQUIREMENTS:-pytensor>=3.0,<3.1}"

sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
# libopenblas-dev: PyTensor's C linker links its BLAS Ops against it (below).
for p in python3-venv python3-dev g++ make libopenblas-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || { $sudo apt-get update -q; DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$p"; }
done

# No --system-site-packages: Debian's numpy 1.x and pygpu stay out of this venv.
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade "pip>=23" "setuptools>=70" wheel
# shellcheck disable=SC2086  # the requirements are words
"$venv/bin/python" -m pip install -q $requirements "numpy>=2" numba tqdm cloudpickle \
  "pytest>=7" "pytest-timeout>=2"

# PyTensor's BLAS probe looks for MKL, libcblas or libgfortran, none of which
# Debian's OpenBLAS gives, and warns at every import that it "could not link
# to a BLAS installation" (its C linker then runs dot products on numpy's C
# API).  The venv gets a PyTensor config file that names OpenBLAS, listed
# first in PYTENSORRC by a .pth file, so that it is the lowest-priority
# source: ~/.pytensorrc, the user's PYTENSORRC and PYTENSOR_FLAGS override it.
venv_abs="$(cd "$venv" && pwd)"
cat >"$venv_abs/pytensorrc" <<RC
# PyTensor defaults of this venv, written by theano_queue's scripts/install-pytensor.sh.
[blas]
ldflags = -lopenblas
RC
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cat >"$site/theano_queue_venv.pth" <<'PTH'
import os, sys; _rc = os.path.join(sys.prefix, "pytensorrc"); _have = os.environ.get("PYTENSORRC", "~/.pytensorrc"); os.environ["PYTENSORRC"] = _have if _rc in _have.split(os.pathsep) else os.pathsep.join([_rc, _have])
PTH
