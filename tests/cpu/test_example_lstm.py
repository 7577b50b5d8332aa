"""examples/train_lstm.py: an LSTM trained from a queue of variable-length sequences, with masks."""

from helpers import load_example


def test_the_lstm_example_trains_and_ships_less_than_the_bound(capsys):
    result = load_example("train_lstm").main(["--epochs", "3", "--samples", "1024"])
    losses = result["losses"]
    assert losses[-1] < 0.6 * losses[0], losses
    stats = result["stats"]
    assert stats["enqueued"] == stats["dequeued"] == 3 * 32
    # tokens padded to the global bound alone would be 32 rows x 64 x 4 bytes per batch
    assert stats["bytes_in"] < 0.5 * stats["enqueued"] * 32 * 64 * 4
    assert "epoch 3" in capsys.readouterr().out
