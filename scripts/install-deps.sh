#!/usr/bin/env bash
# Installs what theano_queue needs on Debian bookworm: system packages (when
# missing), a venv made from Debian's Python 3.11 that sees Debian's pygpu,
# and the pinned Python packages.  Safe to run again.
set -euo pipefail
venv="${1:-.venv}"

apt_packages=(python3-venv python3-dev python3-pygpu libgpuarray-dev libopenblas-dev g++ make)
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
"$venv/bin/python" -m pip install -q --no-build-isolation numpy==1.23.5 -e ".[test,doc]"
