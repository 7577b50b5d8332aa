"""Build and install theano_queue.

The engine is plain C (c_code/): it builds with gcc alone; CUDA is loaded at
run time when a queue targets a GPU.  ``pip install .`` builds it against
numpy 2's headers (pyproject.toml), which serves numpy 1.x too; the Theano
venv builds it in place with ``python setup.py build_ext --inplace`` against
its numpy 1.23.5.  Each build keeps its object files and engine in folders of
its Python's and numpy's own (:class:`BuildPerNumpy`), so that one never
takes the other's engine for up to date.  The graph library is an extra: ``theano_queue[theano]``
(Theano 1.0.5, numpy 1.23) or ``theano_queue[pytensor]`` (PyTensor 2.38.x, as
PyMC 5.28 pins it, or 3.0.x), so that neither is forced on the other's users.
"""

import glob
import os

import numpy
from setuptools import Extension, find_packages, setup
from setuptools.command.build import build
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def engine_sources(*groups):
    """The engine's C files of these groups (all when none), from c_code/sources.txt: the one list."""
    listed = {}
    with open(os.path.join(HERE, "c_code", "sources.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                group, names = line.split(":", 1)
                listed[group.strip()] = ["c_code/" + path for path in names.split()]
    return [path for group in groups or listed for path in listed[group]]


# The engine (plain C), its CUDA backend and its CPython face (tq_py_*.c).
ENGINE_SOURCES = engine_sources()
# Its headers: a changed one rebuilds the engine, as a changed source does.
ENGINE_HEADERS = sorted(glob.glob(os.path.join("c_code", "**", "*.h"), recursive=True))


class BuildPerNumpy(build):
    """Object files and the built engine in folders named after the numpy they were compiled against.

    setuptools names its folders after the platform and Python only
    (``build/lib.linux-x86_64-cpython-311``), and skips compiling an engine it
    finds there newer than its sources.  An engine built against numpy 1.23
    (the Theano venv's ``build_ext --inplace``, ``make demo``) then went into
    the wheel ``pip install .`` built against numpy 2, which cannot import it.
    With numpy's version in the names (``...-cpython-311-numpy2.4.6``) each
    numpy's build has its own objects and engine; a folder given on the
    command line is left as given.
    """

    def finalize_options(self):
        numpy_tag = "-numpy" + numpy.__version__
        chosen = self.build_platlib, self.build_lib, self.build_temp
        super().finalize_options()
        if chosen[0] is None:
            platlib = self.build_platlib
            self.build_platlib = platlib + numpy_tag
            if chosen[1] is None and self.build_lib == platlib:
                self.build_lib = self.build_platlib
        if chosen[2] is None:
            self.build_temp += numpy_tag


# Ray Data as a source (examples/ray_feed.py); never a dependency of the core package.
# pyarrow >= 19 needs numpy 2, which Theano 1.0.5 cannot run with.
RAY = ["ray[data]>=2.30,<3", "pyarrow>=12,<19"]


class BuildWithCCode(build_py):
    """Ship c_code/ inside the package: the Ops' C files are compiled by Theano at run time."""

    def run(self):
        super().run()
        # Its folders (ops/, engine/, python/, generated/) keep their names: the Ops find headers by folder.
        source = os.path.join(HERE, "c_code")
        for folder, _, names in sorted(os.walk(source)):
            target = os.path.join(self.build_lib, "theano_queue", "c_code", os.path.relpath(folder, source))
            self.mkpath(target)
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    self.copy_file(os.path.join(folder, name), os.path.join(target, name))


setup(
    name="theano_queue",
    version="0.1.0",
    description="Graph-level queue Ops for Theano: batches stream to the device while the model trains",
    long_description=open(os.path.join(HERE, "README.rst")).read(),
    long_description_content_type="text/x-rst",
    packages=find_packages(include=["theano_queue", "theano_queue.*"]),
    package_data={"theano_queue": ["_engine.pyi"]},  # the extension's types
    python_requires=">=3.9",
    # The core (engine, feeders, monitor) runs under either graph library.
    install_requires=["numpy>=1.23", "tqdm>=4.60", "cloudpickle>=2"],
    extras_require={
        # Theano 1.0.5 needs numpy < 1.24; Debian's pygpu (GPU queues) needs >= 1.23.
        "theano": ["theano==1.0.5", "numpy>=1.23,<1.24"],
        # PyMC 5.28 pins PyTensor 2.38.x; 3.0.x is the last series on Python 3.11.
        "pytensor": ["pytensor>=2.38,<3.1"],
        # ruff is pinned: its formatting is `make lint`'s standard (ruff.toml); mypy checks the package's types;
        # build makes the release's sdist and wheel (make test ends with them: make wheel).
        "test": [
            "pytest>=7",
            "pytest-timeout>=2",
            "scikit-learn>=1.2",
            "ruff==0.17.6",
            "mypy>=2.4,<3",
            "build>=1",
            *RAY,
        ],
        "demo": ["scikit-learn>=1.2"],
        "ray": RAY,
        # A producer of device arrays (examples/gpu_augment.py); builds against a CUDA toolkit.
        "pycuda": ["pycuda>=2022.1"],
        "doc": ["sphinx>=6", "matplotlib>=3.7,<3.9", "contourpy<1.3"],
    },
    ext_modules=[
        Extension(
            "theano_queue._engine",
            sources=ENGINE_SOURCES,
            include_dirs=[
                "c_code/engine/core",
                "c_code/engine/cuda",
                "c_code/python",
                "c_code/generated",
                numpy.get_include(),
            ],
            depends=ENGINE_HEADERS,
            extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wno-missing-field-initializers"],
            libraries=["pthread", "dl"],
        )
    ],
    entry_points={"console_scripts": ["theano-queue = theano_queue.tools.cli:main"]},
    cmdclass={"build": BuildPerNumpy, "build_py": BuildWithCCode},
)
