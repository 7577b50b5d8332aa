"""Train a Keras 2.3.1 model on MNIST-shaped digits fed through a theano_queue.Queue.

    python examples/keras_mnist.py --epochs 5             # an MLP
    python examples/keras_mnist.py --model cnn --held     # a CNN; the dataset held on the GPU

The images are scikit-learn's 8x8 digits grown to MNIST's 28x28 uint8 (no
download).  They cross into the queue as uint8, a quarter of float32's bytes,
and become floats on the device, in the model's first layer (Theano's
convolution cannot differentiate through integer inputs; after the cast
there is nothing to differentiate).  x and y come from one dequeue; the
model is built on ``keras.Input(tensor=x)`` and trains with ``fit`` from an
array-dataset Feeder that shuffles every epoch; ``tqk.QueueEnd`` ends ``fit``
where the data ends, ``tqk.HeldOut`` scores the held-out digits at each
epoch's end, and ``tqk.numpy_twin`` evaluates the trained layers on numpy.
It runs on the GPU when THEANO_FLAGS selects one (device=cuda0).
"""

import argparse
import time

import numpy as np

import theano_queue as tq
import theano_queue.keras as tqk  # before keras: its Python 3.11 aliases and Theano backend
from theano_queue.core.arguments import int_at_least
from theano_queue.tools.demo import load_digits

# isort: split
import keras
from keras import backend as K
from keras import layers


def mnist_shaped(digits):
    """scikit-learn's 8x8 digits in [0, 1] as 28x28x1 uint8 images: each pixel 3x3, a 2-pixel border."""
    images = np.kron(digits.reshape(-1, 8, 8), np.ones((3, 3), "float32"))
    images = np.pad(images, ((0, 0), (2, 2), (2, 2)))
    return np.round(255 * images).astype("uint8")[..., None]


def build(x, kind):
    """The model, from the dequeued uint8 images to class probabilities."""
    inputs = keras.Input(tensor=x)  # uint8, (None, 28, 28, 1): the queue's shape
    pixels = layers.Lambda(lambda t: K.cast(t, "float32") / 255, output_shape=lambda shape: shape, name="to_float")(
        inputs
    )
    if kind == "cnn":
        hidden = layers.Conv2D(16, 3, activation="relu")(pixels)
        hidden = layers.MaxPooling2D(2)(hidden)
        hidden = layers.Conv2D(32, 3, activation="relu")(hidden)
        hidden = layers.MaxPooling2D(2)(hidden)
        hidden = layers.Flatten()(hidden)
    else:
        hidden = layers.Dense(256, activation="relu")(layers.Flatten()(pixels))
    outputs = layers.Dense(10, activation="softmax")(hidden)
    return keras.Model(inputs, outputs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int_at_least(1), default=5, help="passes over the training digits")
    parser.add_argument("--batch-size", type=int_at_least(1), default=64, help="images per step")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp", help="a one-hidden-layer MLP or a small CNN")
    parser.add_argument(
        "--steps-per-epoch",
        type=int_at_least(1),
        default=None,
        help="steps of one Keras epoch (default: the batches of one pass; any other count works too)",
    )
    parser.add_argument("--held", action="store_true", help="copy the dataset to the GPU once (GPU queues)")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="the split's and the shuffle's seed")
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=2, help="Keras's fit verbosity")
    args = parser.parse_args(argv)

    images, labels = load_digits()
    images = mnist_shaped(images)
    order = np.random.default_rng(args.seed).permutation(len(images))
    test, train = order[: len(order) // 5], order[len(order) // 5 :]
    x_train, y_train = images[train], labels[train]

    queue = tq.Queue(
        [("x", "uint8", (args.batch_size, 28, 28, 1)), ("y", "int32", (args.batch_size,))], capacity=4, name="mnist"
    )
    x, y = queue.dequeue()  # one dequeue: x and y are the same batch's
    model = build(x, args.model)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"], target_tensors=[y])

    batches_per_pass = -(-len(x_train) // args.batch_size)
    steps = args.steps_per_epoch or batches_per_pass
    epochs = -(-args.epochs * batches_per_pass // steps)  # Keras epochs enough for every batch
    started = time.perf_counter()
    with tq.Feeder(queue, (x_train, y_train), shuffle=True, seed=args.seed, epochs=args.epochs, device=args.held):
        history = model.fit(
            epochs=epochs,
            steps_per_epoch=steps,
            verbose=args.verbose,
            callbacks=[tqk.HeldOut((images[test], labels[test])), tqk.QueueEnd(queue)],
        )
    seconds = time.perf_counter() - started
    loss, accuracy = tqk.numpy_twin(model).evaluate(images[test], labels[test], verbose=0)
    print(
        "%d Keras epochs of %d steps in %.1f s; held-out loss %.4f, accuracy %.3f"
        % (len(history.epoch), steps, seconds, loss, accuracy)
    )
    return {"history": history.history, "epochs": history.epoch, "test_accuracy": accuracy, "stats": queue.stats()}


if __name__ == "__main__":
    main()
