"""The GPU half of tests/cpu/test_trace.py: a GPU queue's trace records when the copy filled the slot.

Run with ``THEANO_FLAGS=device=cuda0 python -m pytest -q tests/gpu/test_trace_gpu.py``."""

import numpy as np
import pytest
import theano
from trace_helpers import check_causal

import theano_queue as tq

pytestmark = pytest.mark.gpu


@pytest.mark.gpu
def test_gpu_trace_has_filled_after_the_copy_was_issued(tmp_path):
    q = tq.Queue([("x", "float32", (1024, 256))], capacity=3, name="gpu_traced")
    f = theano.function([], q.dequeue().sum())
    batches = [np.full((1024, 256), i, "float32") for i in range(20)]
    with tq.Feeder(q, batches):
        with q.trace(str(tmp_path / "gpu.json"), steps=10) as trace:
            for i in range(20):
                assert float(np.asarray(f())) == i * 1024 * 256
    assert len(trace.elements) == 10
    for e in trace.elements:
        check_causal(e["ns"], gpu=True)
    assert any(ev["name"].startswith("copy to device") for ev in trace.chrome()["traceEvents"])
