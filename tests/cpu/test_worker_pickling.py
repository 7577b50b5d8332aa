"""Datasets go to spawned workers by reference wherever the workers can import them (issue 27, item 2)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from timing import scaled

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")  # the helper modules
ROOT = os.path.dirname(os.path.dirname(SUPPORT))
MiB = 1 << 20


def python(args, stdin=None, timeout=scaled(120)):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, SUPPORT, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env, cwd=SUPPORT
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("memmap") / "data.npy")
    np.lib.format.open_memmap(path, mode="w+", dtype="float32", shape=(100 * MiB // 4096, 1024))[:] = 1.0
    return path


def script_run(data_file, start_method):
    code, out, err = python([os.path.join(SUPPORT, "worker_memmap_script.py"), data_file, start_method])
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_main_script_dataset_over_a_module_level_memmap_is_sent_by_reference(data_file):
    spawned, forked = script_run(data_file, "spawn"), script_run(data_file, "fork")
    print("spawn", spawned, "fork", forked)
    assert spawned["payload_bytes"] < MiB
    # The whole map was read by the worker in both runs: a copy of it would land in its private memory.
    assert spawned["RssAnon"] <= 1.2 * forked["RssAnon"]
    assert spawned["VmRSS"] <= 1.2 * forked["VmRSS"]


PIPED = """
import threading
import numpy as np
import theano_queue as tq

LOCK = threading.Lock()


class Rows:
    def __len__(self):
        return 32

    def __getitem__(self, i):
        with LOCK:
            return (np.full(4, i, "float32"),)


if __name__ == "__main__":
    q = tq.Queue([("x", "float32", (8, 4))], capacity=2, target="cpu", timeout=60)
    try:
        tq.Feeder(q, Rows(), workers=1)
    except Exception as exc:
        print(type(exc).__name__, exc)
"""


def test_a_script_read_from_standard_input_is_refused_under_spawn_saying_why():
    code, out, err = python(["-"], stdin=PIPED)
    assert code == 0, err
    assert out.startswith("RuntimeError") and "standard input" in out and "start_method='fork'" in out


def test_a_class_sent_by_value_names_the_global_that_does_not_pickle():
    code, out, err = python(["-c", PIPED])
    assert code == 0, err
    assert out.startswith("TypeError") and "cannot pickle the global 'LOCK' (a lock) of module __main__" in out
    assert "Rows.__getitem__" in out


def test_an_attribute_that_does_not_pickle_is_named():
    from worker_datasets import Tagged

    import theano_queue as tq

    dataset = Tagged(16)
    dataset.conn = __import__("threading").Lock()
    q = tq.Queue([("x", "float32", (8, 5, 3)), ("y", "int64", (8,))], capacity=2, target="cpu")
    with pytest.raises(TypeError, match="cannot pickle the dataset's attribute 'conn' \\(a lock\\)"):
        tq.Feeder(q, dataset, workers=1)


def test_a_function_s_local_class_still_goes_by_value():
    code, out, err = python(
        [
            "-c",
            textwrap.dedent("""
        import numpy as np
        import theano_queue as tq

        def main():
            class Local:
                def __len__(self):
                    return 16

                def __getitem__(self, i):
                    return (np.full(4, i, "float32"),)

            q = tq.Queue([("x", "float32", (8, 4))], capacity=2, target="cpu", timeout=60)
            with tq.Feeder(q, Local(), workers=1):
                print(q.get()[0][:, 0].tolist())

        if __name__ == "__main__":
            main()
        """),
        ]
    )
    assert code == 0, err
    assert out.strip() == str([float(i) for i in range(8)])


def test_a_memmap_the_dataset_holds_travels_as_its_file(data_file):
    import pickle

    from worker_datasets import Tagged

    from theano_queue.feed import payload

    dataset = Tagged(16)
    dataset.rows = np.load(data_file, mmap_mode="r")
    sent = payload.dumps(dataset, main_by_reference=True)
    assert len(sent) < 4096, "the map was copied: %d bytes" % len(sent)
    back = pickle.loads(sent)
    assert isinstance(back.rows, np.memmap) and back.rows.shape == dataset.rows.shape
    assert np.array_equal(back.rows[-3:], dataset.rows[-3:])
    view = dataset.rows[10:20]  # a view is not the whole map: it goes by value, as numpy pickles it
    assert np.array_equal(pickle.loads(payload.dumps(view, True)), view)


GUARDED = """
import numpy as np
import theano_queue as tq

if __name__ == "__main__":

    class Rows:  # under the guard: a worker's import of this script never defines it
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return (np.full(4, i, "float32"),)

    q = tq.Queue([("x", "float32", (8, 4))], capacity=2, target="cpu", timeout=60)
    with tq.Feeder(q, Rows(), workers=1):
        print(q.get()[0][:, 0].tolist())
"""


def test_a_class_defined_under_the_main_guard_still_reaches_the_workers(tmp_path):
    script = tmp_path / "guarded.py"
    script.write_text(GUARDED)
    code, out, err = python([str(script)])
    assert code == 0, err
    assert out.strip() == str([float(i) for i in range(8)])


SET_UNDER_THE_GUARD = """
import numpy as np
import theano_queue as tq

TABLE = None  # set under the guard: a worker's import of this script leaves it None


class Rows:
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return (TABLE[i],)


if __name__ == "__main__":
    TABLE = np.arange(64, dtype="float32").reshape(16, 4)
    q = tq.Queue([("x", "float32", (8, 4))], capacity=2, target="cpu", timeout=60)
    with tq.Feeder(q, Rows(), workers=1):
        print(q.get()[0][:, 0].tolist())
"""


def test_a_class_reading_a_global_the_guard_sets_goes_with_the_parent_s_value(tmp_path):
    script = tmp_path / "set_under_guard.py"
    script.write_text(SET_UNDER_THE_GUARD)
    code, out, err = python([str(script)])
    assert code == 0, err
    assert out.strip() == str([float(4 * i) for i in range(8)])
