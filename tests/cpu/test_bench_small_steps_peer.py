"""bench/run.py's scenario 19 runs bench/torch_small_step.py with --torch-python and keeps its rows (issue 43.1)."""

import argparse
import json
import sys

from bench.run import torch_small_steps

FAKE_PEER = """
import json, sys
args = sys.argv[1:]
assert args[:2] == ["-m", "bench.torch_small_step"], args
value = lambda name: args[args.index(name) + 1]
profiles = []
for text in value("--shapes").split(","):
    shape, hidden = text.split(":")
    rows = [{"part": p, "us/step": 800.0 * x, "x resident": x, "spread": 1.1}
            for p, x in (("resident", 1.0), ("sliced", 1.01), ("prefetched", 1.25), ("dataloader", 1.3))]
    profiles.append({"shape": shape, "hidden": int(hidden), "rows": rows, "steps": value("--steps")})
json.dump({"torch": "stand-in", "profiles": profiles}, open(value("--json"), "w"))
"""


def bench_with(torch_python):
    return argparse.Namespace(args=argparse.Namespace(torch_python=torch_python))


def test_the_peer_is_asked_for_each_shape_and_its_rows_are_kept(tmp_path):
    script = tmp_path / "fake_peer.py"
    script.write_text(FAKE_PEER)
    peer = torch_small_steps(bench_with("%s %s" % (sys.executable, script)), [(256, 784, 256), (500, 784, 16)], 30, 2)
    assert peer["prefetched"] == {"256x784": 1.25, "500x784": 1.25}
    parts = [(r["step"], r["hidden"], r["part"]) for r in peer["rows"]]
    assert parts[:4] == [("256x784", 256, "PyTorch " + p) for p in ("resident", "sliced", "prefetched", "dataloader")]
    assert parts[4][:2] == ("500x784", 16)
    json.dumps(peer)  # goes into results.json


def test_a_python_without_pytorch_says_why_instead_of_failing(tmp_path):
    script = tmp_path / "no_torch.py"
    script.write_text("import sys\nsys.exit('No module named torch')\n")
    peer = torch_small_steps(bench_with("%s %s" % (sys.executable, script)), [(256, 784, 256)], 30, 2)
    assert "No module named torch" in peer["skipped"]
