"""Keras 2.3.1 (Theano backend) trained from a queue: theano_queue.keras and examples/keras_mnist.py."""

import re

import numpy as np
import pytest
from clients import set_keras_backend, skip_unless_installed
from helpers import load_example

import theano_queue as tq

# Theano's backend before anything imports Keras (a fresh machine's default is TensorFlow).  Skipped only where
# Keras is not installed at all: where it is, a failing import fails this module.
set_keras_backend()
skip_unless_installed("keras", "scripts/install-deps.sh installs it")
import theano_queue.keras as tqk  # noqa: E402

# isort: split
import keras  # noqa: E402
from keras import backend as K  # noqa: E402
from keras import layers  # noqa: E402

N_FEATURES, BATCH = 6, 8


def dataset(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, N_FEATURES)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32")


def queue_model(metrics=()):
    """A queue of (x, y) and a small classifier built on its one dequeue, compiled to train from it."""
    q = tq.Queue([("x", "float32", (BATCH, N_FEATURES)), ("y", "int32", (BATCH,))], capacity=3, target="cpu")
    x, y = q.dequeue()
    inputs = keras.Input(tensor=x)
    model = keras.Model(inputs, layers.Dense(2, activation="softmax")(layers.Dense(4, activation="relu")(inputs)))
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=list(metrics), target_tensors=[y])
    return q, model


class Recorder(keras.callbacks.Callback):
    """The losses of every step and the epochs whose end ran."""

    def on_train_begin(self, logs=None):
        self.losses, self.ended = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.losses.append([])

    def on_train_batch_end(self, batch, logs=None):
        if logs.get("size"):
            self.losses[-1].append(float(logs["loss"]))

    def on_epoch_end(self, epoch, logs=None):
        self.ended.append(epoch)


def test_dequeued_variables_carry_the_shape_keras_reads():
    q = tq.Queue([("x", "uint8", (BATCH, 28, 28, 1)), ("y", "int32", (BATCH,))], target="cpu")
    x, y = q.dequeue()
    assert K.int_shape(x) == (None, 28, 28, 1) and K.int_shape(y) == (None,)
    inputs = keras.Input(tensor=x)  # no shape=
    assert K.int_shape(inputs) == (None, 28, 28, 1) and inputs.dtype == "uint8"


def test_fit_ends_where_the_data_ends_with_its_history_and_epoch_ends():
    q, model = queue_model(metrics=["accuracy"])
    x, y = dataset(15 * BATCH)
    recorder = Recorder()
    with tq.Feeder(q, (x, y), shuffle=True, epochs=2):  # 30 batches; 7 steps a Keras epoch
        history = model.fit(epochs=10, steps_per_epoch=7, verbose=0, callbacks=[tqk.QueueEnd(q), recorder])
    assert history.epoch == [0, 1, 2, 3, 4]  # 4 epochs of 7 steps, then 2 steps
    assert recorder.ended == [0, 1, 2, 3, 4]
    assert [len(steps) for steps in recorder.losses] == [7, 7, 7, 7, 2]
    assert len(history.history["loss"]) == len(history.history["accuracy"]) == 5
    # The step that found the queue drained counts in no average.
    assert history.history["loss"][-1] == pytest.approx(np.mean(recorder.losses[-1]), rel=1e-5)
    assert q.stats()["dequeued"] == 30


def test_no_empty_epoch_when_the_data_ends_with_a_keras_epoch():
    q, model = queue_model()
    with tq.Feeder(q, dataset(10 * BATCH), epochs=2):  # 20 batches, 2 Keras epochs of 10
        history = model.fit(epochs=5, steps_per_epoch=10, verbose=0, callbacks=[tqk.QueueEnd(q)])
    assert history.epoch == [0, 1] and len(history.history["loss"]) == 2
    q.reopen()  # the next fit from the same queue and the same compiled function
    with tq.Feeder(q, dataset(3 * BATCH), epochs=1):
        history = model.fit(epochs=2, steps_per_epoch=5, verbose=0, callbacks=[tqk.QueueEnd(q)])
    assert history.epoch == [0]


def test_without_the_callback_queueclosed_escapes_fit():
    # What QueueEnd is for: Keras alone has no end of data.
    q, model = queue_model()
    with tq.Feeder(q, dataset(2 * BATCH)):
        with pytest.raises(tq.QueueClosed):
            model.fit(epochs=1, steps_per_epoch=3, verbose=0)


def test_the_numpy_twin_evaluates_held_out_data_with_the_trained_weights():
    q, model = queue_model(metrics=["accuracy"])
    x_test, y_test = dataset(64, seed=1)
    twin = tqk.numpy_twin(model)
    before = twin.predict(x_test)
    with tq.Feeder(q, dataset(20 * BATCH), epochs=3):
        model.fit(epochs=3, steps_per_epoch=20, verbose=0, callbacks=[tqk.QueueEnd(q)])
    after = twin.predict(x_test)
    assert not np.allclose(before, after)  # the twin sees the training's weights
    w1, b1, w2, b2 = model.get_weights()
    hidden = np.maximum(x_test @ w1 + b1, 0)
    logits = hidden @ w2 + b2
    expected = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(after, expected / expected.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)
    loss, accuracy = twin.evaluate(x_test, y_test, verbose=0)
    assert accuracy == pytest.approx(np.mean(after.argmax(1) == y_test))


def test_held_out_puts_validation_metrics_in_each_epochs_logs():
    q, model = queue_model(metrics=["accuracy"])
    with tq.Feeder(q, dataset(4 * BATCH), epochs=2):
        history = model.fit(
            epochs=2, steps_per_epoch=4, verbose=0, callbacks=[tqk.HeldOut(dataset(32, seed=2)), tqk.QueueEnd(q)]
        )
    assert len(history.history["val_loss"]) == len(history.history["val_accuracy"]) == 2


@pytest.mark.parametrize("verbose", [1, 2])
def test_held_out_figures_are_on_keras_epoch_line(capsys, verbose):
    """As validation_data's are: the line Keras prints at each epoch's end shows them, equal to the History's."""
    q, model = queue_model(metrics=["accuracy"])
    with tq.Feeder(q, dataset(4 * BATCH), epochs=2):
        history = model.fit(
            epochs=2, steps_per_epoch=4, verbose=verbose, callbacks=[tqk.HeldOut(dataset(32, seed=2)), tqk.QueueEnd(q)]
        )
    out = capsys.readouterr().out
    shown = [float(v) for v in re.findall(r"- val_loss: ([0-9.e+-]+) - val_accuracy: [0-9.]+", out)]
    assert len(shown) == 2, out
    assert shown == pytest.approx(history.history["val_loss"], rel=1e-3, abs=1e-4)
    assert len(history.history["val_loss"]) == 2  # evaluated once an epoch


@pytest.mark.parametrize(
    "call",
    [
        lambda model, x, y: model.evaluate(x, y, verbose=0),
        lambda model, x, y: model.predict(x),
        lambda model, x, y: model.train_on_batch(x, y),
        lambda model, x, y: model.fit(epochs=1, steps_per_epoch=1, validation_data=(x, y), verbose=0),
    ],
    ids=["evaluate", "predict", "train_on_batch", "validation_data"],
)
def test_numpy_arrays_given_to_a_queue_fed_model_point_to_its_twin(call):
    q, model = queue_model(metrics=["accuracy"])
    x, y = dataset(16, seed=3)
    with pytest.raises(ValueError, match=r"takes its data from Queue 'queue\d+'.*tqk\.numpy_twin\(model\)\.evaluate"):
        call(model, x, y)
    assert q.stats()["dequeued"] == 0


def test_the_mnist_example_trains_a_cnn_from_a_uint8_queue(capsys):
    # uint8 straight into Conv2D fails in Theano's convolution gradient; the example's cast layer is the fix.
    result = load_example("keras_mnist").main(["--model", "cnn", "--epochs", "2", "--steps-per-epoch", "15"])
    assert result["test_accuracy"] > 0.5, result
    assert result["stats"]["dequeued"] == 2 * 23  # every batch of both passes, over 4 Keras epochs of 15 steps
    assert result["epochs"] == [0, 1, 2, 3]
    assert "held-out loss" in capsys.readouterr().out


def test_a_uint8_queue_straight_into_conv2d_says_how_to_make_it_floats():
    q = tq.Queue([("x", "uint8", (BATCH, 8, 8, 1)), ("y", "int32", (BATCH,))], target="cpu")
    x, y = q.dequeue()
    inputs = keras.Input(tensor=x)
    model = keras.Model(inputs, layers.Dense(2, activation="softmax")(layers.Flatten()(layers.Conv2D(2, 3)(inputs))))
    model.compile("sgd", "sparse_categorical_crossentropy", target_tensors=[y])
    with pytest.raises(
        TypeError, match=r"its input 'x' is uint8.*layers.Lambda\(lambda t: K.cast\(t, 'float32'\) / 255"
    ):
        model.fit(epochs=1, steps_per_epoch=1, verbose=0)
    assert q.stats()["dequeued"] == 0


def test_the_same_batches_train_the_same_weights_as_a_numpy_fed_fit():
    q, fed = queue_model()
    inputs = keras.Input(shape=(N_FEATURES,))
    plain = keras.Model(inputs, layers.Dense(2, activation="softmax")(layers.Dense(4, activation="relu")(inputs)))
    plain.compile("sgd", "sparse_categorical_crossentropy")
    plain.set_weights(fed.get_weights())
    x, y = dataset(6 * BATCH)
    with tq.Feeder(q, (x, y)):  # in order, as fit(shuffle=False) takes them
        fed.fit(epochs=1, steps_per_epoch=6, verbose=0, callbacks=[tqk.QueueEnd(q)])
    plain.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(fed.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(a, b)
