"""The README's main job: the digits demo trains to a useful accuracy."""

import pytest
from helpers import load_example

pytest.importorskip("sklearn", reason="the demo's digits come from scikit-learn")


def test_demo_reaches_ninety_percent_test_accuracy(capsys):
    result = load_example("train_digits").main(["--epochs", "15"])
    assert result["test_accuracy"] >= 0.9
    stats = result["stats"]
    assert stats["enqueued"] == stats["dequeued"] > 0
    out = capsys.readouterr().out
    assert "epoch 15" in out and "final test accuracy" in out
