"""examples/train_lstm.py: an LSTM trained from a queue of variable-length sequences, with masks."""
import importlib.util
import os

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "train_lstm.py")


def load_example():
    spec = importlib.util.spec_from_file_location("train_lstm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lstm_example_trains_and_ships_less_than_the_bound(capsys):
    result = load_example().main(["--epochs", "3", "--samples", "1024"])
    losses = result["losses"]
    assert losses[-1] < 0.6 * losses[0], losses
    stats = result["stats"]
    assert stats["enqueued"] == stats["dequeued"] == 3 * 32
    # tokens padded to the global bound alone would be 32 rows x 64 x 4 bytes per batch
    assert stats["bytes_in"] < 0.5 * stats["enqueued"] * 32 * 64 * 4
    assert "epoch 3" in capsys.readouterr().out
