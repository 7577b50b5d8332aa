"""PTX of one CUDA source file through NVRTC, for scripts/gen_ptx.sh where nvcc is missing.

    python3 scripts/nvrtc_ptx.py KERNEL.cu OUT.ptx

NVRTC is the compiler nvcc uses for device code, as a library: pip's
``nvidia-cuda-nvrtc-cu12`` has it (``NVRTC=/path/to/libnvrtc.so.12`` where it
is not found by name).  The options are gen_ptx.sh's: compute_75, optimised.
"""

import ctypes
import os
import sys

OPTIONS = [b"--gpu-architecture=compute_75", b"--std=c++14"]


def nvrtc():
    return ctypes.CDLL(os.environ.get("NVRTC", "libnvrtc.so.12"))


def ptx_of(source: bytes, name: bytes) -> str:
    lib = nvrtc()
    program = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(program), source, name, 0, None, None):
        sys.exit("nvrtcCreateProgram failed")
    options = (ctypes.c_char_p * len(OPTIONS))(*OPTIONS)
    failed = lib.nvrtcCompileProgram(program, len(OPTIONS), options)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, log)
    if failed:
        sys.exit("%s: %s" % (name.decode(), log.value.decode()))
    lib.nvrtcGetPTXSize(program, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(program, ptx)
    return ptx.value.decode()


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        text = ptx_of(f.read(), os.path.basename(sys.argv[1]).encode())
    with open(sys.argv[2], "w") as f:
        f.write(text)
