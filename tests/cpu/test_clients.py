"""Every installed client's tests run (issue 41.3): the Keras tests on a machine without ~/.keras, a run whose
installed client's tests all skip fails, and each run ends with its skips counted by reason."""

import os
import re
import subprocess
import sys
import textwrap

import pytest
import skip_report
from clients import CLIENTS, installed
from timing import scaled

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUPPORT = os.path.join(ROOT, "tests", "support")


def pytest_run(args, cwd=ROOT, env=None, timeout=120):
    """pytest in a subprocess of this venv's Python, its output and exit status."""
    environment = dict(os.environ, **(env or {}))
    environment.pop("KERAS_BACKEND", None)  # as on a fresh machine
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=scaled(timeout),
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.skipif(not installed("keras"), reason="Keras 2.3.1 is not installed (scripts/install-deps.sh installs it)")
def test_the_keras_tests_are_collected_on_a_machine_without_a_keras_config(tmp_path):
    """Keras's first import on a fresh HOME picks TensorFlow and writes ~/.keras/keras.json: the tests must not
    care (they set Theano's backend before any Keras import)."""
    path = os.path.join(ROOT, "tests", "cpu", "test_keras.py")
    with open(path) as f:
        defined = re.findall(r"^def (test_\w+)", f.read(), flags=re.M)
    status, out = pytest_run(["--collect-only", "-q", path], env={"HOME": str(tmp_path)}, timeout=300)
    assert status == 0, out[-3000:]
    assert "skipped" not in out, out[-3000:]
    collected = re.findall(r"::(test_\w+)", out)
    assert set(collected) == set(defined), out[-3000:]  # every test, parametrized ones once per case


def fake_client_run(tmp_path, body):
    """A test file that stands for Keras's, run with the plugin: (exit status, output)."""
    test = tmp_path / "test_fake_keras.py"
    test.write_text(textwrap.dedent(body))
    plugin = tmp_path / "fake_clients.py"
    tests = os.path.relpath(str(test), ROOT)
    plugin.write_text(
        "import clients\nclients.CLIENTS['keras'] = (%r, (%r,))\n" % (CLIENTS["keras"][0], tests.replace(os.sep, "/"))
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), SUPPORT]), "TQ_SKIPS_FILE": str(tmp_path / "skips.jsonl")}
    return pytest_run(["-p", "fake_clients", "-p", "skip_report", "--rootdir", str(tmp_path), str(test)], env=env)


@pytest.mark.skipif(not installed("keras"), reason="Keras 2.3.1 is not installed (scripts/install-deps.sh installs it)")
@pytest.mark.parametrize(
    "body",
    [
        # The whole module skipped, as importorskip("keras") did on a fresh machine.
        """
        import pytest
        pytest.skip("Keras 2.3.1 is not installed", allow_module_level=True)
        """,
        # Every test skipped for any reason.
        """
        import pytest
        @pytest.mark.skip(reason="the backend is not Theano's")
        def test_one(): pass
        """,
        # One test says Keras is not installed, where it is.
        """
        import pytest
        def test_runs(): pass
        def test_refuses(): pytest.skip("Keras 2.3.1 is not installed")
        """,
    ],
    ids=["module skipped", "all skipped", "says not installed"],
)
def test_a_run_whose_installed_clients_tests_skip_fails(tmp_path, body):
    status, out = fake_client_run(tmp_path, body)
    assert status == 1, out
    assert "installed client not tested: Keras 2.3.1" in out, out
    assert "Keras 2.3.1 is installed (keras) but its tests skipped" in out, out


@pytest.mark.skipif(not installed("keras"), reason="Keras 2.3.1 is not installed (scripts/install-deps.sh installs it)")
def test_a_run_whose_client_tests_ran_passes_and_lists_its_other_skips(tmp_path):
    status, out = fake_client_run(
        tmp_path,
        """
        import pytest
        def test_runs(): pass
        @pytest.mark.parametrize("k", [1, 2])
        def test_gpu(k): pytest.skip("needs a GPU")
        """,
    )
    assert status == 0, out
    assert "installed client not tested" not in out
    assert re.search(r"skipped, by reason.*\n\s+2  needs a GPU  \(e\.g\. ", out), out
    # The file make test's last step lists every suite's skips from.
    listing = subprocess.run(
        [sys.executable, os.path.join(SUPPORT, "skip_report.py"), str(tmp_path / "skips.jsonl"), "missing.jsonl"],
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert listing.returncode == 0, listing.stderr
    assert "Skipped tests, by suite and reason (2):" in listing.stdout
    assert re.search(r"\n\s+2  %s: needs a GPU  \(e\.g\. " % re.escape(skip_report.suite_name()), listing.stdout)


def test_every_client_names_test_files_that_exist():
    for module, (name, tests) in CLIENTS.items():
        for test in tests:
            assert os.path.exists(os.path.join(ROOT, test.split("::")[0])), (module, test)
