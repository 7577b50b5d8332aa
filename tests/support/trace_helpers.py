"""What tests/cpu/test_trace.py and tests/gpu/test_trace_gpu.py share."""

# Per element, each of these happens no earlier than the one before it.
CHAIN = ["put_begin", "reserved", "put_end", "copy_issued", "ready", "dequeued", "consumed"]


def check_causal(ns, gpu=False):
    for earlier, later in zip(CHAIN, CHAIN[1:]):
        assert ns[earlier] <= ns[later], (earlier, later, ns)
    assert ns["get_begin"] <= ns["dequeued"]
    if gpu:
        assert ns["copy_issued"] <= ns["filled"]
    else:
        assert "filled" not in ns  # host memory: the data is there at commit
