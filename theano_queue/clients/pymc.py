"""A queue in PyMC's workflow: the model fitted on batches from a queue, and everything else on arrays.

A PyMC 5 model whose data are dequeued variables (``observed=y_q``,
``total_size=N``) trains with ``pm.fit`` on whatever the Feeder delivers.
What evaluates the model's data outside the fit (predictions, prior
samples, ``pm.model_to_graphviz``, ``model.point_logps()``) would take a
training batch from the queue, or wait for one; :func:`swap` gives it a copy
of the model whose dequeued variables are arrays instead, as PyMC's own
``pm.Minibatch`` users do with ``pm.Data`` and ``pm.set_data``.  Those calls
on the queue-fed model itself are refused when their function is linked,
before anything is taken (:func:`refuse_outside_fit`): only a fit reads the
queue.

:class:`StopWhenDrained` ends a fit fed by a finite Feeder when the data
end, keeping its loss history (``approx.hist``), and warns when a
likelihood on dequeued data has no ``total_size``.  PyMC is imported only
when these are used.
"""

import time
import warnings

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.traversal import ancestors

from ..core import schema
from ..core.errors import QueueError
from ..graph.pytensor import Dequeue, reaching_call

# PyMC's calls that read a queue-fed model's data batch by batch: a fit (pm.fit, Inference.fit/refine) and
# the step and score functions it compiles, for users who drive the steps themselves; and pm.compile called by
# the user (pymc.pytensorf), a function of his own as pytensor.function's are.  Every other PyMC call
# evaluates the data once, for the whole data set, and is refused.
FIT_MODULES = ("pymc.variational.inference", "pymc.pytensorf")
FIT_FUNCTIONS = ("ObjectiveFunction.step_function", "ObjectiveFunction.score_function")
APPROX_SAMPLE_HINT = (
    "; for approx.sample, take the draws alone (return_inferencedata=False) and the data from the copy: "
    "pm.to_inference_data(draws, model=tq.swap(...))"
)


def is_dequeued(variable):
    return variable.owner is not None and isinstance(variable.owner.op, Dequeue)


def as_data(variable, value):
    """``value`` as a graph variable that can stand where ``variable`` (a dequeued one) stood."""
    if isinstance(value, Variable):
        data = value
    else:
        # The dequeued variable's component decides, by the one rule (theano_queue/core/schema.py): int64 labels
        # for an int32 component are refused, not truncated.
        op = variable.owner.op
        component = op.components[variable.owner.outputs.index(variable)]
        data = pt.as_tensor_variable(schema.cast(component, value, op.queue_name))
    if data.ndim != variable.ndim or data.dtype != variable.dtype:
        raise TypeError(
            "swap: %s is a %d-d %s variable; got %d-d %s data for it"
            % (variable, variable.ndim, variable.dtype, data.ndim, data.dtype)
        )
    return data


def swap(model, data):
    """A copy of ``model`` in which the dequeued variables are the arrays (or variables) of ``data``.

    ``data`` maps what ``q.dequeue()`` gave to what should stand there, e.g.
    ``{x_q: X, y_q: y}`` for the full data set (a likelihood with
    ``total_size=len(X)`` is then not rescaled) or ``{x_q: X_new, y_q:
    np.zeros(len(X_new), "int32")}`` to predict on new rows.  The copy takes
    nothing from the queue: use it with ``pm.sample_posterior_predictive``,
    ``pm.sample_prior_predictive``, ``pm.model_to_graphviz`` or
    ``point_logps()``; ``model`` itself is left as it is, to go on training.
    A dequeued variable of the model left out of ``data`` would still take
    from the queue: swapping some of them only is allowed.
    """
    from pymc.model.fgraph import fgraph_from_model, model_from_fgraph

    fgraph, memo = fgraph_from_model(model)
    replacements = []
    for variable, value in data.items():
        if not isinstance(variable, Variable) or not is_dequeued(variable):
            raise TypeError("swap: the keys of data are variables that q.dequeue() gave; got %r" % (variable,))
        if variable not in memo:
            raise ValueError("swap: %s is not a variable of this model (no variable of the model uses it)" % variable)
        replacements.append((memo[variable], as_data(variable, value)))
    fgraph.replace_all(replacements, import_missing=True, reason="theano_queue.swap")
    return model_from_fgraph(fgraph, mutate_fgraph=True)


def refuse_outside_fit(node):
    """Refuses (QueueError) to link a Dequeue into a function PyMC compiles outside a fit.

    A fitted model's data are its queue's: ``approx.sample``'s InferenceData,
    ``pm.sample_posterior_predictive``, ``pm.model_to_graphviz`` or
    ``point_logps()`` on it would take a training batch, or wait on a queue
    whose run has ended; the copy :func:`swap` makes runs them on arrays.
    Runs as one of :class:`~theano_queue.graph.pytensor.Dequeue`'s link checks,
    for every linker; a function the user compiles himself is left alone.
    """
    frame, name = reaching_call()
    if frame is None or frame.f_globals["__name__"].split(".")[0] != "pymc":
        return
    if frame.f_globals["__name__"] in FIT_MODULES or frame.f_code.co_qualname in FIT_FUNCTIONS:
        return
    op = node.op
    names = ", ".join(repr(c.name) for c in op.components)
    raise QueueError(
        "%s reached %s: only a fit reads a model's data from its queue; this call would take a "
        "training batch, or wait on a queue whose run has ended. Call it on a copy of the model with the "
        "arrays in place of the queue's variables: tq.swap(model, {x_q: X, y_q: y}) for the variables "
        "q.dequeue() gave (components %s) and the whole data set"
        % (name, op, names)
        + (APPROX_SAMPLE_HINT if name == "Approximation.sample" else "")
    )


Dequeue.link_checks.append(refuse_outside_fit)


def unscaled_likelihoods(model):
    """Names of the observed variables whose data come from a queue but that have no ``total_size``."""
    from pymc.variational.minibatch_rv import MinibatchRandomVariable

    names = []
    for rv in model.observed_RVs:
        if isinstance(rv.owner.op, MinibatchRandomVariable):
            continue
        if any(is_dequeued(v) for v in ancestors([model.rvs_to_values[rv], rv])):
            names.append(rv.name)
    return names


def check_model(model):
    """Warns (UserWarning) for each likelihood on dequeued data without ``total_size``.

    Without it PyMC weighs the likelihood as if the whole data set were one
    batch: the posterior is as wide as one batch allows.  PyMC warns of this
    for ``pm.Minibatch`` only.
    """
    for name in unscaled_likelihoods(model):
        warnings.warn(
            "theano_queue: the observed variable %r takes its data from a queue but has no total_size: PyMC "
            "weighs its likelihood as if one batch were the whole data set; give total_size=<rows in the "
            "data set> when you make it" % name,
            UserWarning,
            stacklevel=3,
        )


class StopWhenDrained:
    """A ``pm.fit`` callback that ends the fit when the queue's data have ended, keeping its history.

    ``pm.fit(n, callbacks=[StopWhenDrained(q)])``: after each step it waits
    (up to the queue's timeout) until the next element is there or the
    queue is closed; closed and drained, it ends the fit as PyMC's own
    callbacks do (StopIteration), so that ``approx.hist`` keeps the fit's
    losses: all but the last step's, which PyMC drops from the history of a
    fit that a callback ended (it slices ``scores[:i]``, for every callback);
    this callback's ``hist`` holds them all.  Without it, the step that finds
    the queue drained raises QueueClosed out of ``pm.fit`` and the history is
    lost.  A queue failed by its Feeder's source is left to the next step,
    which raises FeederError.  At the first step it also runs
    :func:`check_model`.
    """

    # The waits are polls (the ring has no wait that takes nothing), growing
    # from 0.1 ms to 2 ms: in the steady state the next element is already
    # there and the callback returns at once.
    poll_first_s, poll_most_s = 0.0001, 0.002

    def __init__(self, queue):
        self.queue = queue
        self.checked = False
        # Every step's loss, the last one included (None for fits without loss):
        # PyMC's own array, not a copy (a copy per step would cost the fit's length each time).
        self.hist = np.empty(0)

    def __call__(self, approx, losses, i):
        if not self.checked:
            self.checked = True
            check_model(approx.model)
        self.hist = losses
        if self.drained():
            raise StopIteration(
                "theano_queue: queue %r closed and drained after %d steps: fit ended" % (self.queue.name, i)
            )

    def drained(self):
        """True once the next dequeue would raise QueueClosed (not FeederError, not a timeout)."""
        timeout = self.queue.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = self.poll_first_s
        while self.queue.size() == 0 and not self.queue.closed:
            if deadline is not None and time.monotonic() >= deadline:
                return False  # the next step raises QueueTimeout itself
            time.sleep(poll)
            poll = min(2 * poll, self.poll_most_s)
        return self.queue.size() == 0 and self.queue.stats()["state"] == "closed"


__all__ = ["swap", "check_model", "StopWhenDrained"]
