#!/usr/bin/env bash
# Installs what theano_queue needs on Debian bookworm: system packages (when
# missing), a venv made from Debian's Python 3.11 that sees Debian's pygpu,
# the pinned Python packages, and the venv's Theano defaults.  Safe to run again.
set -euo pipefail
venv="${1:-.venv}"

# clang-format: `make lint` checks the C tree with it (14 on bookworm, the version .clang-format is written for).
apt_packages=(python3-venv python3-dev python3-pygpu libgpuarray-dev libopenblas-dev g++ make clang-format)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

# pygpu is Debian's, built for /usr/bin/python3 (3.11): the venv must see it.
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --upgrade "pip>=23" "setuptools>=65" wheel
# Theano 1.0.5 needs numpy < 1.24; Debian's pygpu needs >= 1.23.  Pinned in
# the same command as the rest, so no other requirement can move it.
"$venv/bin/python" -m pip install -q numpy==1.23.5 theano==1.0.5
"$venv/bin/python" -m pip install -q --no-build-isolation numpy==1.23.5 -e ".[test,doc,theano]"
# Keras 2.3.1, the last Keras with a Theano backend (theano_queue.keras, examples/keras_mnist.py).  Without
# its dependencies: pip would pull h5py (only for saving to HDF5) and could move numpy; what it imports is
# numpy, scipy (scikit-learn's, above), six, and these two of its own, pinned to their last releases.
"$venv/bin/python" -m pip install -q --no-deps keras==2.3.1 keras-applications==1.0.8 keras-preprocessing==1.1.2 \
  "six>=1.12"

# Theano's own BLAS probe reads numpy.distutils' build record, which numpy
# 1.23.5's wheels lack: without blas.ldflags set, `import theano` dies.  The
# venv gets a Theano config file with that one setting, listed first in
# THEANORC by a .pth file, so that it is the lowest-priority source: the
# user's ~/.theanorc (or their own THEANORC) and THEANO_FLAGS override it.
venv_abs="$(cd "$venv" && pwd)"
cat >"$venv_abs/theanorc" <<RC
# Theano defaults of this venv, written by theano_queue's scripts/install-deps.sh.
# Lowest priority: ~/.theanorc, THEANORC files and THEANO_FLAGS override them.
[blas]
ldflags = -lopenblas
RC
# Theano 1.0.5 builds scan's inner loop from Cython output that Python 3.11
# cannot compile (its frame and exception internals moved), and dies there;
# the second line makes that module's import fail, as Theano expects where it
# cannot build it, so scan runs its own Python loop (the step stays compiled).
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cat >"$site/theano_queue_venv.pth" <<'PTH'
import os, sys; _rc = os.path.join(sys.prefix, "theanorc"); _have = os.environ.get("THEANORC", "~/.theanorc"); os.environ["THEANORC"] = _have if _rc in _have.split(os.pathsep) else os.pathsep.join([_rc, _have])
import sys; sys.version_info >= (3, 11) and sys.modules.setdefault("theano.scan_module.scan_perform_ext", None)
PTH
