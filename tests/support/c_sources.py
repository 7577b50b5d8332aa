"""The engine's C sources for the C tests, from c_code/sources.txt (the list setup.py builds from)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def engine_sources(*groups):
    """Paths relative to the repository of the engine's C files in these groups ("core", "cuda", "python")."""
    listed = {}
    with open(os.path.join(ROOT, "c_code", "sources.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                group, names = line.split(":", 1)
                listed[group.strip()] = ["c_code/" + path for path in names.split()]
    return [path for group in groups for path in listed[group]]
