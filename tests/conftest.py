"""Test set-up: float32 as Theano's default float (before Theano is imported;
the venv supplies blas.ldflags), and the ``gpu`` marker, skipped unless
Theano runs on a CUDA device."""

import os

os.environ.setdefault("THEANO_FLAGS", "floatX=float32")

import pytest  # noqa: E402

# The PyTensor suite runs in its own venv with its own config (make test-pytensor).
collect_ignore = ["pytensor"]


def theano_gpu_available():
    from theano_queue.target import theano_gpu_contexts

    return bool(theano_gpu_contexts())


def pytest_collection_modifyitems(config, items):
    gpu_marked = [item for item in items if "gpu" in item.keywords]
    if not gpu_marked or theano_gpu_available():
        return
    skip = pytest.mark.skip(reason="needs Theano on a CUDA GPU (THEANO_FLAGS=device=cuda0)")
    for item in gpu_marked:
        item.add_marker(skip)
