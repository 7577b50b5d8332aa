"""Checks the release's files that ``python -m build`` made (``make wheel``, run by ``make test``).

    python scripts/check_wheel.py build/dist

The folder must hold one sdist and one wheel, and the wheel (built from the
sdist, as ``python -m build`` does) every file a user's install needs: the
package's Python files, ``c_code/`` whole under ``theano_queue/c_code/`` (the
Ops' C, compiled by Theano or PyTensor at run time, and the engine's
headers), the engine's type stub ``_engine.pyi`` and the built engine.  Exits
1 naming what is missing, so that a release is an upload of a checked folder.
"""

import glob
import os
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def needed_files(root=ROOT):
    """The paths inside the wheel that the checkout's tree says it must hold."""
    needed = {"theano_queue/_engine.pyi"}
    for folder, _, names in os.walk(os.path.join(root, "theano_queue")):
        if "__pycache__" in folder:
            continue
        needed.update(
            os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            for name in names
            if name.endswith(".py")
        )
    for folder, _, names in os.walk(os.path.join(root, "c_code")):
        for name in names:
            if name.endswith((".c", ".h")):
                needed.add("theano_queue/" + os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return needed


def missing_from(wheel, root=ROOT):
    """What the wheel lacks, sorted: needed files, and the engine (``theano_queue/_engine*.so``)."""
    with zipfile.ZipFile(wheel) as z:
        held = set(z.namelist())
    missing = sorted(needed_files(root) - held)
    if not any(name.startswith("theano_queue/_engine") and name.endswith(".so") for name in held):
        missing.append("theano_queue/_engine*.so (the built engine)")
    return missing


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    folder = argv[0] if argv else os.path.join(ROOT, "build", "dist")
    wheels = glob.glob(os.path.join(folder, "theano_queue-*.whl"))
    sdists = glob.glob(os.path.join(folder, "theano_queue-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(
            "check_wheel: %s holds %d wheel(s) and %d sdist(s); python -m build makes one of each"
            % (folder, len(wheels), len(sdists)),
            file=sys.stderr,
        )
        return 1
    missing = missing_from(wheels[0])
    if missing:
        print("check_wheel: %s lacks %s" % (os.path.basename(wheels[0]), ", ".join(missing)), file=sys.stderr)
        return 1
    print("check_wheel: %s and %s hold what an install needs" % tuple(os.path.basename(p) for p in sdists + wheels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
