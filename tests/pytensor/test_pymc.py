"""A queue in PyMC 5's workflow (runs where PyMC is installed: .venv-pymc).

The model: logistic regression on dequeued (x, y) batches, ``total_size``
given, fitted by ADVI; everything that evaluates the data outside the fit
goes through ``tq.swap``.
"""

import time
import warnings

import numpy as np
import pytensor
import pytest

pm = pytest.importorskip("pymc")

import theano_queue.pytensor as tq  # noqa: E402
from theano_queue.graph.pytensor import Dequeue  # noqa: E402

N, D, B = 400, 3, 40  # 10 batches an epoch
rng = np.random.default_rng(0)
X = rng.normal(size=(N, D))
Y = (rng.random(N) < 1 / (1 + np.exp(-X @ np.array([1.0, -2.0, 0.5])))).astype("int32")


def make_queue():
    return tq.Queue([("x", "float64", (B, D)), ("y", "int32", (B,))], capacity=4, timeout=30)


def logistic_model(x, y, **likelihood):
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=D)
        pm.Bernoulli("obs", logit_p=x @ beta, observed=y, **likelihood)
    return model


@pytest.fixture
def queued():
    q = make_queue()
    x, y = q.dequeue()
    return q, x, y, logistic_model(x, y, total_size=N)


def test_fit_with_several_monte_carlo_samples_goes_past_the_dequeue(queued):
    """obj_n_mc > 1 takes gradients through the graph that holds the Dequeue (NotImplementedError before)."""
    q, _, _, model = queued
    with tq.Feeder(q, (X, Y), epochs=None, shuffle=True, seed=1):
        approx = pm.fit(30, method="advi", obj_n_mc=3, model=model, progressbar=False)
    assert len(approx.hist) == 30 and np.isfinite(approx.hist).all()


def test_finite_feeder_ends_the_fit_and_keeps_its_history(queued):
    q, x, y, model = queued
    with tq.Feeder(q, (X, Y), epochs=2):  # 20 batches, fewer than n
        stop = tq.StopWhenDrained(q)
        approx = pm.fit(1000, model=model, progressbar=False, callbacks=[stop])
    assert len(stop.hist) == 20 and np.isfinite(stop.hist).all()
    # PyMC drops the last step's loss from the history of a fit a callback ended.
    assert np.array_equal(approx.hist, stop.hist[:-1])
    # approx.sample's InferenceData would evaluate the observed data (refused); its draws alone do not,
    # and the swapped model gives the data.
    trace = approx.sample(5, return_inferencedata=False)
    idata = pm.to_inference_data(trace, model=tq.swap(model, {x: X, y: Y}))
    assert idata.posterior["beta"].shape == (1, 5, D) and idata.observed_data["obs"].shape == (N,)
    assert q.stats()["dequeued"] == 20
    assert q.stats()["dequeued"] == 20  # the fit took every batch, and nothing more


def fitted(queued, **feeder):
    """The queue-fed model after a fit, its Feeder's with block left with batches still in the queue."""
    q, x, y, model = queued
    with tq.Feeder(q, (X, Y), epochs=None, shuffle=True, seed=0, **feeder):
        approx = pm.fit(20, model=model, progressbar=False)
    while q.size() < q.capacity and not q.closed:  # the Feeder had filled it, or is closing it
        time.sleep(0.01)
    return approx


CALLS_OUTSIDE_A_FIT = {
    "approx.sample": lambda approx, model: approx.sample(5),
    "pm.sample_posterior_predictive": lambda approx, model: pm.sample_posterior_predictive(
        approx.sample(5, return_inferencedata=False), model=model, progressbar=False
    ),
    "pm.sample_prior_predictive": lambda approx, model: pm.sample_prior_predictive(5, model=model),
    "pm.model_to_graphviz": lambda approx, model: pm.model_to_graphviz(model),
    "Model.point_logps": lambda approx, model: model.point_logps(),
    "Model.compile_logp": lambda approx, model: model.compile_logp()(model.initial_point()),
}
CALL_NAMES = {"approx.sample": "Approximation.sample"}


@pytest.mark.parametrize("call", sorted(CALLS_OUTSIDE_A_FIT))
def test_pymc_calls_after_a_fit_are_refused_before_they_take_a_batch(queued, call):
    """approx.sample's observed_data was one leftover batch; posterior predictive took batches, then failed."""
    q, x, y, model = queued
    approx = fitted(queued)
    left = (q.size(), q.stats()["dequeued"])
    with pytest.raises(tq.QueueError, match=r"^%s reached Dequeue\{.*tq\.swap\(model" % CALL_NAMES.get(call, call)):
        CALLS_OUTSIDE_A_FIT[call](approx, model)
    assert (q.size(), q.stats()["dequeued"]) == left  # nothing was taken
    # The copy with the whole data set runs the same call, and the queue still is not read.
    if call not in ("approx.sample", "pm.model_to_graphviz"):  # graphviz: not installed here
        CALLS_OUTSIDE_A_FIT[call](approx, tq.swap(model, {x: X, y: Y}))
    assert (q.size(), q.stats()["dequeued"]) == left


def test_the_refusal_holds_under_numba_too(queued):
    q, _, _, model = queued
    q.put(X[:B], Y[:B])
    with pytensor.config.change_flags(mode="NUMBA"), pytest.raises(tq.QueueError, match=r"^Model\.point_logps reached"):
        model.point_logps()
    assert q.size() == 1


def test_functions_the_user_compiles_still_read_the_queue(queued):
    q, x, y, model = queued
    q.put(X[:B], Y[:B])
    q.put(X[B : 2 * B], Y[B : 2 * B])
    assert pm.compile([], y)().tolist() == Y[:B].tolist()  # pm.compile by the user: his own function
    assert pytensor.function([], y)().tolist() == Y[B : 2 * B].tolist()


def test_a_fit_on_a_run_that_has_ended_says_it_was_the_fit(queued):
    q, _, _, model = queued
    with tq.Feeder(q, (X, Y), epochs=1):
        pm.fit(1000, model=model, progressbar=False, callbacks=[tq.StopWhenDrained(q)])
    with pytest.raises(tq.QueueClosed, match=r"reached by pm\.fit\b"):
        pm.fit(5, model=model, progressbar=False)


def test_a_failed_source_is_not_taken_for_the_end_of_the_data(queued):
    q, _, _, model = queued

    def batches():
        for s in range(0, 3 * B, B):
            yield X[s : s + B], Y[s : s + B]
        raise RuntimeError("batch 3 is broken")

    with pytest.raises(tq.FeederError), tq.Feeder(q, batches()):
        pm.fit(1000, model=model, progressbar=False, callbacks=[tq.StopWhenDrained(q)])
    assert q.stats()["dequeued"] == 3


def test_swapped_model_evaluates_arrays_and_leaves_the_queue_alone(queued):
    q, x, y, model = queued
    q.put(X[:B], Y[:B])  # a training batch: nothing below may take it
    full = tq.swap(model, {x: X, y: Y})
    direct = logistic_model(X, Y)  # the same model on the arrays; total_size=N on N rows scales by 1
    point = {"beta": np.array([0.3, -0.1, 0.2])}
    assert np.isclose(full.compile_logp()(point), direct.compile_logp()(point))
    assert full.point_logps() == direct.point_logps()
    plates = {
        tuple(p.dim_info.lengths): [v.var.name for v in p.variables]
        for p in pm.model_graph.ModelGraph(full).get_plates()
    }
    assert plates[(N,)] == ["obs"]  # what pm.model_to_graphviz draws
    with full:
        prior = pm.sample_prior_predictive(5, random_seed=1)
    assert prior.prior_predictive["obs"].shape == (1, 5, N)
    new = tq.swap(model, {x: X[:7], y: np.zeros(7, "int32")})
    with new:
        predicted = pm.sample_posterior_predictive(prior.prior, progressbar=False, random_seed=1)
    assert predicted.posterior_predictive["obs"].shape == (1, 5, 7)
    assert q.size() == 1 and q.stats()["dequeued"] == 0


def test_swap_refuses_what_it_cannot_put_there(queued):
    q, x, y, model = queued
    with pytest.raises(TypeError, match=r"2-d float64 variable; got 1-d float64"):
        tq.swap(model, {x: X[:, 0], y: Y})
    with pytest.raises(TypeError, match="variables that q.dequeue"):
        tq.swap(model, {"x": X})
    other_x, _ = make_queue().dequeue()
    with pytest.raises(ValueError, match="not a variable of this model"):
        tq.swap(model, {other_x: X})


def test_likelihood_on_dequeued_data_without_total_size_warns():
    q = make_queue()
    x, y = q.dequeue()
    with pytest.warns(UserWarning, match=r"'obs' takes its data from a queue but has no total_size"):
        tq.check_model(logistic_model(x, y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tq.check_model(logistic_model(x, y, total_size=N))
        tq.check_model(logistic_model(X, Y))  # arrays: PyMC's own business


def test_stop_when_drained_warns_at_the_first_step_where_total_size_is_missing():
    """doc/pymc.rst: StopWhenDrained runs check_model at the fit's first step."""
    q = make_queue()
    x, y = q.dequeue()
    with pytest.warns(UserWarning, match="'obs' takes its data from a queue but has no total_size"):
        with tq.Feeder(q, (X, Y), epochs=1):
            stop = tq.StopWhenDrained(q)
            pm.fit(1000, model=logistic_model(x, y), progressbar=False, callbacks=[stop])
    assert len(stop.hist) == N // B


def casts_between_the_dequeue_and(variable):
    """The Ops from ``variable`` down to the Dequeue it reads (one input each), outermost first."""
    ops = []
    while variable.owner is not None and not isinstance(variable.owner.op, Dequeue):
        ops.append(str(variable.owner.op))
        (variable,) = variable.owner.inputs
    assert variable.owner is not None, "no Dequeue under the observed data"
    return ops


@pytest.mark.parametrize("label_dtype, casts", [("int32", ["Cast{int64}"]), ("int64", ["Cast{int64}", "Cast{int32}"])])
def test_labels_and_features_as_the_pymc_page_says(label_dtype, casts):
    """doc/pymc.rst: int32 labels cost one cast to the Bernoulli's int64; int64 ones are narrowed to PyMC's intX
    (int32) and cast back, two casts.  float32 features under PyMC's floatX=float64 are upcast, with no warning."""
    x, y = tq.Queue([("x", "float64", (B, D)), ("y", label_dtype, (B,))]).dequeue()
    model = logistic_model(x, y, total_size=N)
    assert casts_between_the_dequeue_and(model.rvs_to_values[model["obs"]]) == casts
    x32, y32 = tq.Queue([("x", "float32", (B, D)), ("y", "int32", (B,))]).dequeue()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logp = logistic_model(x32, y32, total_size=N).logp()
    assert logp.dtype == "float64"
