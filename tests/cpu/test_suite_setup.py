"""The suite holds under load (issue 27, item 6): its own Theano compile directory, timeouts scaled."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT, _load_scale, _theano_flags
from timing import SCALE, scaled


def test_the_suite_compiles_in_a_directory_of_its_own_unless_told():
    own = "base_compiledir=" + os.path.join(ROOT, "build", "theano-compiledir")
    assert _theano_flags("floatX=float32") == "floatX=float32," + own
    assert _theano_flags("") == own
    assert _theano_flags("floatX=float32,base_compiledir=/elsewhere") == "floatX=float32,base_compiledir=/elsewhere"
    assert _theano_flags("compiledir=/x") == "compiledir=/x"


def test_theano_in_this_run_uses_it():
    import theano

    flags = os.environ["THEANO_FLAGS"]
    assert "base_compiledir=" in flags or "compiledir=" in flags
    named = [f.split("=", 1)[1] for f in flags.split(",") if f.startswith("base_compiledir=")]
    if named:
        assert os.path.realpath(theano.config.base_compiledir) == os.path.realpath(named[-1])
    assert not theano.config.compiledir.startswith(os.path.expanduser("~/.theano"))


def test_the_time_scale_follows_the_load_and_never_shrinks_a_bound():
    assert SCALE >= 1.0 and scaled(5) == 5 * SCALE
    assert _load_scale() >= 1.0
    script = (
        "import os, sys; sys.path.insert(0, 'tests/support'); os.environ['TQ_TEST_TIME_SCALE'] = '3.5'; "
        "import timing; print(timing.scaled(60))"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=scaled(60))
    assert out.stdout.strip() == "210.0", out.stderr


def test_pytest_timeouts_are_scaled(request):
    if "PYTEST_TIMEOUT" in os.environ or "--timeout" in " ".join(sys.argv):
        pytest.skip("the per-test limit was given explicitly")
    assert request.config.option.timeout == pytest.approx(float(request.config.getini("timeout")) * SCALE)
