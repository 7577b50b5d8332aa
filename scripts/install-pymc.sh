#!/usr/bin/env bash
# Makes the PyMC venv (default .venv-pymc): scripts/install-pytensor.sh's venv
# with PyMC 5.28.5 and the PyTensor it pins (2.38.x, whose default linker is
# the C linker) in place of PyTensor 3.0.  The PyTensor suite runs here too, so
# that both PyTensor lines stay tested.  Safe to run again.
set -euo pipefail
PYTENSOR_REQUIREMENTS="pymc==5.28.5" exec bash "$(dirname "$0")/install-pytensor.sh" "${1:-.venv-pymc}"
