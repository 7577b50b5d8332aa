#!/usr/bin/env bash
# A pycuda wheel for the GPU machine's legacy stack (../shared/gpu: Debian's
# Python 3.11, numpy 1.23.5), built here, where there is no CUDA toolkit and
# no GPU: NVIDIA's pip wheels give CUDA 13.0's headers, and a stub libcuda.so.1
# (every entry returns CUDA_ERROR_NO_DEVICE) is linked so that the extension
# names libcuda.so.1, which the GPU machine's driver provides at run time.
#
#   bash scripts/build-pycuda-wheel.sh [OUT_DIR]     # default .gpu/ (what enter.sh unpacks)
#
# Writes the pycuda wheel and the wheels it needs at run time into OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-.gpu}")"
py="${PYTHON:-$PWD/.venv/bin/python}"  # a Python 3.11 with numpy 1.23.5 (the project's venv); an absolute path
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pycuda=2026.1
get() { "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
          --platform manylinux2014_x86_64 -d "$@"; }

"$py" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d "$work" "pycuda==$pycuda"
get "$work/headers" nvidia-cuda-runtime==13.0.48 nvidia-cuda-profiler-api==13.0.39
for w in "$work"/headers/*.whl; do "$py" -m zipfile -e "$w" "$work/headers/x"; done
include="$(dirname "$(find "$work/headers/x" -name cuda.h | head -1)")"
cp "$(find "$work/headers/x" -name cudaProfiler.h | head -1)" "$include/" 2>/dev/null || true
tar xzf "$work/pycuda-$pycuda.tar.gz" -C "$work"
src="$work/pycuda-$pycuda"

siteconf() {  # $1: where libcuda is linked from ('' for none)
  cat >"$src/siteconf.py" <<CONF
BOOST_INC_DIR = []
BOOST_LIB_DIR = []
BOOST_COMPILER = 'gcc'
USE_SHIPPED_BOOST = True
BOOST_PYTHON_LIBNAME = []
BOOST_THREAD_LIBNAME = []
CUDA_TRACE = False
CUDA_ROOT = None
CUDA_ENABLE_GL = False
CUDA_ENABLE_CURAND = False
CUDADRV_LIB_DIR = [$([ -n "$1" ] && echo "'$1'")]
CUDADRV_LIBNAME = [$([ -n "$1" ] && echo "'cuda'")]
CUDART_LIB_DIR = []
CUDART_LIBNAME = []
CURAND_LIB_DIR = []
CURAND_LIBNAME = []
CUDA_INC_DIR = ['$include']
CXXFLAGS = []
LDFLAGS = ['-Wl,-S', '-Wl,--no-as-needed']
CONF
}

# Pass 1, no libcuda: the driver entries the extension needs are its undefined cu* symbols.
siteconf ""
(cd "$src" && "$py" setup.py -q build_ext -j "$(nproc)" >"$work/pass1.log" 2>&1)
driver_so="$(find "$src/build" -name '_driver*.so' | head -1)"
mkdir -p "$work/stub"
{
  echo "/* link-only stand-in for libcuda.so.1: every entry returns CUDA_ERROR_NO_DEVICE */"
  nm -D --undefined-only "$driver_so" | awk '$2 ~ /^cu/ {print "int " $2 "(void) { return 100; }"}'
} >"$work/stub/stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/stub/libcuda.so" "$work/stub/stub.c"

# Pass 2, linked against the stand-in: the wheel names libcuda.so.1.
siteconf "$work/stub"
find "$src/build" -name '*.so' -delete  # relinked, now naming libcuda.so.1
(cd "$src" && "$py" setup.py -q build_ext -j "$(nproc)" bdist_wheel -d "$out" >"$work/pass2.log" 2>&1)
get "$out" pytools==2026.1.1 platformdirs==4.14.8 typing_extensions==4.16.0 siphash24==1.9
readelf -d "$(find "$src/build" -name '_driver*.so' | head -1)" | grep -q 'libcuda.so.1' \
  || { echo "build-pycuda-wheel: the extension does not name libcuda.so.1" >&2; exit 1; }
ls -1 "$out" | grep -E '^(pycuda|pytools|platformdirs|typing_extensions|siphash24)-'
