"""The feed contract (tests/support/feed_contract.py) for device puts: each case's batches as device arrays put
into a GPU queue whose ring is the stand-in driver's (tests/c/fake_libcuda.c), taken or refused as every other
kind takes or refuses them, in the same words.  Device arrays are never cast (device memory is copied as it is):
what another kind casts is refused here, in the device put's one wording (feed_contract.DEVICE_REFUSES).  And
a device array of any dtype but the exact one is the schema's to judge (schema.device_dtype; the exact dtype is
the fast path, one comparison): a stand-in rule that refuses everything refuses them."""

import json

import pytest
from fake_cuda import fake_cuda  # noqa: F401  (a fixture)
from feed_contract import CASES, NOT_APPLICABLE, expected_message
from test_device_fake import run

BODY = """
import json
import theano.gpuarray.type as gpu_type
import theano_queue as tq
from theano_queue.core import device_arrays as tq_device, schema
from feed_contract import CASES, NOT_APPLICABLE, ROWS, SAMPLES, batches, check_values, message_of, padded

# A variable-length put uploads its lengths into Theano's GPU context, which the stand-in cannot give: the
# stand-in's own upload stands in for it (fake_device.upload).
gpu_type.get_context = lambda name: None
tq_device.uploader = lambda context: upload


def on_device(value):
    if isinstance(value, list):  # a variable-length component's rows: padded, with host lengths
        data, lengths = padded(value)
        return tq.Padded(CAI(device_copy(data)), lengths)
    return CAI(device_copy(np.asarray(value)))


def outcome(case):
    spec, sample, _ = CASES[case]
    q = gpu_queue(spec, capacity=SAMPLES // ROWS, name="device")
    error = values = None
    try:
        for batch in batches(q, sample):
            q.put(*map(on_device, batch)) if isinstance(batch, tuple) else q.put(on_device(batch))
    except (TypeError, ValueError) as exc:
        error = [type(exc).__name__, message_of(exc)]
    q.close()
    got = []
    while True:
        try:
            got.append(q.get(timeout=30, lengths=q._layout.varying))
        except tq.QueueClosed:
            break
    if error is None:
        try:
            check_values(q, got, sample)
        except AssertionError as exc:
            values = repr(exc)
    return {"taken": len(got), "error": error, "values": values}


results = {case: outcome(case) for case in CASES if ("device", case) not in NOT_APPLICABLE}
asked = []


def refusing(component, dtype, queue_name):
    asked.append(component.name)
    raise TypeError("Queue %r, component %r: refused by the stand-in rule" % (queue_name, component.name))


schema.device_dtype = refusing
results["stand-in rule"] = {case: outcome(case) for case in ("safe cast", "variable length")}
results["stand-in rule asked"] = asked
print("RESULTS", json.dumps(results))
"""


@pytest.fixture(scope="module")
def outcomes(fake_cuda, tmp_path_factory):  # noqa: F811
    fake = dict(fake_cuda, FAKE_CUDA_LOG=str(tmp_path_factory.mktemp("device_contract") / "calls"))
    out = run(fake, BODY)
    return json.loads(out.split("RESULTS ", 1)[1])


@pytest.mark.parametrize("case", list(CASES))
def test_device_puts_take_and_refuse_as_every_kind_does(case, outcomes):
    if ("device", case) in NOT_APPLICABLE:
        assert NOT_APPLICABLE["device", case]  # said why
        return
    got = outcomes[case]
    refused = CASES[case][2] is not None or case in ("safe cast", "variable length")
    if not refused:
        assert got["error"] is None and got["values"] is None, got
        return
    cls = CASES[case][2][0].__name__ if CASES[case][2] else "TypeError"
    assert got["error"] == [cls, expected_message("device", case, "device")], got
    assert got["taken"] == 0  # a refused element costs the queue nothing


def test_every_device_put_asks_the_schema(outcomes):
    for case, got in outcomes["stand-in rule"].items():
        assert got["error"][0] == "TypeError" and "refused by the stand-in rule" in got["error"][1], (case, got)
        assert got["taken"] == 0
    assert set(outcomes["stand-in rule asked"]) == {"x", "tokens"}
