"""The README's main job: the digits demo trains to a useful accuracy."""
import importlib.util
import os

import pytest

pytest.importorskip("sklearn", reason="the demo's digits come from scikit-learn")

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "train_digits.py")


def load_example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_reaches_ninety_percent_test_accuracy(capsys):
    result = load_example().main(["--epochs", "15"])
    assert result["test_accuracy"] >= 0.9
    stats = result["stats"]
    assert stats["enqueued"] == stats["dequeued"] > 0
    out = capsys.readouterr().out
    assert "epoch 15" in out and "final test accuracy" in out
