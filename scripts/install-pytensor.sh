#!/usr/bin/env bash
# Makes the PyTensor venv (default .venv-pytensor): Debian's Python 3.11,
# PyTensor 3.0.x (the last series for Python 3.11) with numpy 2 and Numba,
# and the test tools.  theano_queue itself is installed into it separately
# (the Makefile's pytensor-engine target: a wheel built against this numpy),
# so that this venv and the Theano venv (numpy 1.23.5, the engine built in
# place) never rebuild each other's extension.  Safe to run again.
set -euo pipefail
venv="${1:-.venv-pytensor}"

sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
for p in python3-venv python3-dev g++ make; do
  dpkg -s "$p" >/dev/null 2>&1 || { $sudo apt-get update -q; DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$p"; }
done

# No --system-site-packages: Debian's numpy 1.x and pygpu stay out of this venv.
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade "pip>=23" "setuptools>=70" wheel
# PyTensor 3.1+ needs Python >= 3.12; 3.0.x requires numpy >= 2 and Numba.
"$venv/bin/python" -m pip install -q "pytensor>=3.0,<3.1" "numpy>=2" numba tqdm cloudpickle \
  "pytest>=7" "pytest-timeout>=2"
