"""Keras 2.3.1 (its Theano backend) trained from a :class:`~theano_queue.Queue`.

::

    import theano_queue as tq
    import theano_queue.keras as tqk     # before `import keras`: see below
    import keras

    x, y = q.dequeue()                   # one dequeue: x and y of the same batch
    inputs = keras.Input(tensor=x)       # the shape comes from the queue
    model = keras.Model(inputs, layers(inputs))
    model.compile("adam", "sparse_categorical_crossentropy", target_tensors=[y])
    with tq.Feeder(q, (X, Y), shuffle=True, epochs=5):
        history = model.fit(epochs=5, steps_per_epoch=100, callbacks=[tqk.QueueEnd(q)])
    tqk.numpy_twin(model).evaluate(X_test, Y_test)

Importing this module makes Keras 2.3.1 importable on Python 3.10+ (it reads
``collections.Iterable``, ``Mapping`` and ``Sequence``, which moved to
``collections.abc``) and selects its Theano backend where
``KERAS_BACKEND`` is unset.  Keras picks its backend once, at its first
import, and picks TensorFlow on a machine without ``~/.keras/keras.json``:
import this module before ``keras``, or set ``KERAS_BACKEND=theano`` where
something else imports Keras first (a test suite, a notebook).
doc/keras.rst is the guide.
"""

import collections
import collections.abc
import os

for _name in ("Iterable", "Mapping", "Sequence"):
    if not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))
os.environ.setdefault("KERAS_BACKEND", "theano")

import keras  # noqa: E402  (after the aliases and the backend it needs)
from keras import backend as K  # noqa: E402

from ..core.errors import QueueClosed  # noqa: E402
from ..graph.theano import Dequeue  # noqa: E402

if K.backend() != "theano":
    raise ImportError(
        "theano_queue.keras: Keras runs on its %r backend; a Queue's variables are Theano's: set "
        "KERAS_BACKEND=theano (or import theano_queue.keras before keras)" % K.backend()
    )


class QueueEnd(keras.callbacks.Callback):
    """Ends ``fit`` where the queue's data ends, as Keras ends it after its last epoch.

    Give it to ``model.fit(..., callbacks=[tqk.QueueEnd(q)])``.  Where a step
    finds ``q`` closed and drained (the Feeder's epochs are done, or it was
    stopped), the QueueClosed is caught: the epoch ends there, its
    ``on_epoch_end`` callbacks run, the step that found no batch counts in
    none of the History's averages, and ``fit`` returns the History of every step taken.  So
    ``steps_per_epoch`` need not divide the batches the Feeder gives: a Keras
    epoch is ``steps_per_epoch`` steps, the Feeder's are the data's.  An epoch
    that would start on a drained queue does not start (nor appear in the
    History).  Other errors (a FeederError from a failed source) are raised as
    they are.  ``reopen()`` the queue before the next ``fit`` from it.
    """

    def __init__(self, queue):
        super().__init__()
        self.queue = queue
        self._batch_logs = None
        self._steps_this_epoch = 0
        self.ended = False  #: True once a step found the queue drained

    def set_model(self, model):
        super().set_model(model)
        # fit() has made its train function before the callbacks see the model:
        # its compiled theano.function is wrapped in place, once.
        function = getattr(model, "train_function", None)
        if function is not None and not getattr(function.function, "_tq_queue_end", False):
            function.function = _catching_queue_end(function.function, self)

    def on_train_begin(self, logs=None):
        self.ended = False

    def on_epoch_begin(self, epoch, logs=None):
        self._steps_this_epoch = 0

    def on_train_batch_begin(self, batch, logs=None):
        # The dict the train step's outputs go into, kept for the step that finds no batch.
        self._batch_logs = logs

    def on_train_batch_end(self, batch, logs=None):
        if not self.ended:
            self._steps_this_epoch += 1

    def _queue_ended(self):
        self.ended = True
        self.model.stop_training = True
        if self._batch_logs is not None:
            self._batch_logs["size"] = 0  # Keras's BaseLogger averages the losses by it

    def on_epoch_end(self, epoch, logs=None):
        if self._steps_this_epoch and self.queue.closed and self.queue.size() == 0:
            # Drained right at an epoch's end: do not start an empty one.
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        history = getattr(self.model, "history", None)
        if self.ended and not self._steps_this_epoch and history is not None and history.epoch:
            # The queue was drained before this epoch's first step (its end came late): it took nothing.
            history.epoch.pop()
            for values in history.history.values():
                if len(values) > len(history.epoch):
                    values.pop()


def _catching_queue_end(function, callback):
    last = []

    def step(*inputs):
        try:
            last[:] = function(*inputs)
        except QueueClosed:
            callback._queue_ended()
            # Keras's backend fills the metrics into this list by position: it must be as long as
            # always.  Its values count in no average (the step's size is 0), and the metrics are
            # read from their state, which the step that found no batch left as it was.
        return list(last)

    step._tq_queue_end = True
    return step


def integer_inputs_message(model, error):
    """What to say where Keras's gradient failed on a model whose inputs are integers (a uint8 image queue into
    Conv2D): Theano's convolution casts its input's gradient to the input's dtype.  None for other errors."""
    integers = [t for t in model.inputs if t.dtype.startswith(("int", "uint"))]
    if not integers or "into Type TensorType(%s" % integers[0].dtype not in str(error):
        return None
    return (
        "Keras cannot differentiate this model: its input %r is %s, and Theano's convolution (and other layers) "
        "give an integer input a gradient they cannot cast to it.  Make it floats in the model's first layer, on "
        "the device: layers.Lambda(lambda t: K.cast(t, 'float32') / 255, output_shape=lambda s: s)(inputs) "
        "(doc/keras.rst)" % (integers[0].name, integers[0].dtype)
    )


def reworded(method, error_type, message_of, marker):
    """``method`` re-raising its ``error_type`` with ``message_of(model, error)`` where that says more (None: as it
    was); ``marker`` is set on it, so that importing this module again does not wrap it twice."""

    def wrapped(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except error_type as error:
            message = message_of(self, error)
            if message is None:
                raise
            raise error_type(message) from error

    setattr(wrapped, marker, True)
    return wrapped


if not getattr(keras.Model._make_train_function, "_tq_integer_inputs", False):
    # Keras makes its training function (and its gradients) inside fit(): where that fails on integer inputs,
    # the error says why and what to do, instead of Theano's "Cannot convert Type ... into Type ...".
    keras.Model._make_train_function = reworded(
        keras.Model._make_train_function, TypeError, integer_inputs_message, "_tq_integer_inputs"
    )


def feeding_queue(model):
    """The name of the queue whose dequeued variables ``model``'s inputs are, or None."""
    from theano.gof.graph import ancestors

    for variable in ancestors(list(model.inputs)):
        if variable.owner is not None and isinstance(variable.owner.op, Dequeue):
            return variable.owner.op.queue_name
    return None


def numpy_data_message(model, error):
    """What to say where Keras refused numpy arrays ("expected no data") for a model fed by a queue: its twin
    takes them.  None for other errors and other models."""
    queue = feeding_queue(model) if "expected no data" in str(error) else None
    if queue is None:
        return None
    return (
        "Keras model %r takes its data from Queue %r (keras.Input(tensor=...) of its dequeued variables): it takes "
        "no numpy arrays in evaluate, predict, *_on_batch or fit's validation_data.  Use a model that shares its "
        "layers and takes arrays: tqk.numpy_twin(model).evaluate(X, Y) or tqk.numpy_twin(model).predict(X), and "
        "fit(..., callbacks=[tqk.HeldOut((X_val, Y_val))]) for validation (import theano_queue.keras as tqk; "
        "doc/keras.rst)" % (model.name, queue)
    )


if not getattr(keras.Model._standardize_user_data, "_tq_numpy_twin", False):
    # Every Keras call that takes arrays checks them here first: where the model takes its data from a queue, the
    # refusal points to the twin instead of printing the array it refused.
    keras.Model._standardize_user_data = reworded(
        keras.Model._standardize_user_data, ValueError, numpy_data_message, "_tq_numpy_twin"
    )


def numpy_twin(model, compile=True):
    """A model with ``model``'s layers (its weights, shared) whose inputs are placeholders for numpy.

    A model built on ``Input(tensor=x)`` takes its data from the queue:
    Keras refuses numpy arrays in its ``evaluate``, ``predict``,
    ``*_on_batch`` and ``validation_data`` ("expected no data"), and with
    ``steps=`` they would take training batches.  Its twin takes them, so
    ``tqk.numpy_twin(model).evaluate(X_test, Y_test)`` scores held-out data
    with the weights trained so far; training either trains both.  With
    ``compile`` it is compiled with ``model``'s loss, metrics and optimizer.
    """
    inputs = [
        keras.Input(batch_shape=K.int_shape(t), dtype=t.dtype, name="%s_numpy" % layer.name)
        for t, layer in zip(model.inputs, model._input_layers)
    ]
    outputs = model(inputs if len(inputs) > 1 else inputs[0])
    twin = keras.Model(inputs, outputs, name="%s_numpy" % model.name)
    if compile and getattr(model, "optimizer", None) is not None:
        twin.compile(
            model.optimizer,
            model.loss,
            metrics=model._compile_metrics,
            loss_weights=model.loss_weights,
            sample_weight_mode=model.sample_weight_mode,
            weighted_metrics=model._compile_weighted_metrics,
        )
    return twin


class HeldOut(keras.callbacks.Callback):
    """``validation_data`` for a model that trains from a queue: ``val_*`` logs from numpy arrays.

    ``fit(..., callbacks=[tqk.HeldOut((X_val, Y_val))])`` evaluates the
    model's :func:`numpy_twin` on the arrays at each epoch's end and puts
    ``val_loss`` and ``val_<metric>`` in that epoch's logs: on Keras's epoch
    line, as ``validation_data``'s are, and in the History, ``EarlyStopping``
    and ``ModelCheckpoint`` after it.
    """

    def __init__(self, data, batch_size=256):
        super().__init__()
        self.data = data
        self.batch_size = batch_size
        self._twin = None
        self._evaluated = None  # the epoch whose figures are in its logs

    def on_train_begin(self, logs=None):
        # Keras's progress bar shows the names in params["metrics"] (shared by every callback of this fit), and
        # runs before the user's callbacks: it asks this one for its figures first (_progbar_showing_held_out).
        names = ["val_" + name for name in self.model.metrics_names]
        metrics = self.params.setdefault("metrics", [])
        metrics.extend(name for name in names if name not in metrics)
        self._evaluated = None
        held = getattr(self.model, "_tq_held_out", [])
        self.model._tq_held_out = held + [self] if self not in held else held

    def on_train_end(self, logs=None):
        self.model._tq_held_out = [held for held in getattr(self.model, "_tq_held_out", []) if held is not self]

    def evaluate_into(self, epoch, logs):
        """Puts the held-out figures of ``epoch`` into its ``logs``, once."""
        if self._evaluated == epoch or logs is None:
            return
        if self._twin is None:
            self._twin = numpy_twin(self.model)
        x, y = self.data
        values = self._twin.evaluate(x, y, batch_size=self.batch_size, verbose=0)
        values = values if isinstance(values, list) else [values]
        for name, value in zip(self._twin.metrics_names, values):
            logs["val_" + name] = value
        self._evaluated = epoch

    def on_epoch_end(self, epoch, logs=None):
        self.evaluate_into(epoch, logs)  # without a progress bar (verbose=0), here


def _progbar_showing_held_out(on_epoch_end):
    def wrapped(self, epoch, logs=None):
        for held in getattr(self.model, "_tq_held_out", ()):
            held.evaluate_into(epoch, logs)
        return on_epoch_end(self, epoch, logs)

    wrapped._tq_held_out = True
    return wrapped


if not getattr(keras.callbacks.ProgbarLogger.on_epoch_end, "_tq_held_out", False):
    # The epoch line is printed by ProgbarLogger, which Keras puts before the user's callbacks: HeldOut's figures
    # must be in the logs by then to be on it.
    keras.callbacks.ProgbarLogger.on_epoch_end = _progbar_showing_held_out(keras.callbacks.ProgbarLogger.on_epoch_end)


__all__ = ["QueueEnd", "numpy_twin", "HeldOut"]
