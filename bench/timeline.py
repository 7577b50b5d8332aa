"""A traced, monitored training run: the trace JSON and the monitor's lines for the docs.

    python -m bench.timeline --out DIR          # on a GPU machine (or the CPU)
    python -m bench.trace_plot DIR/trace.json doc/_static/trace_h200.png

A 3-layer MLP trains on 16 MiB float32 batches that a Feeder copies from
numpy arrays into the queue while the GPU computes: the trace shows each
batch's write, its copy over the bus and the step that reads it, overlapping.
"""

import argparse
import io
import json
import os

import numpy as np
import theano

import theano_queue as tq  # noqa: E402
from bench.common import cycle, mlp_train_step  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for trace.json and monitor.txt")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--traced", type=int, default=12, help="elements the trace records")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    rng = np.random.default_rng(0)
    q = tq.Queue([("x", "float32", (args.rows, args.cols)), ("y", "int32", (args.rows,))], capacity=3, name="mlp")
    x, y = q.dequeue()
    loss, updates = mlp_train_step(x, y, args.cols, args.hidden, 10, rng)
    step = theano.function([], loss, updates=updates)
    batches = [
        (rng.standard_normal((args.rows, args.cols)).astype("float32"), rng.integers(0, 10, args.rows).astype("int32"))
        for _ in range(4)
    ]

    monitor_text = io.StringIO()
    losses = []
    with tq.monitor(q, file=monitor_text, interval=0.25):
        with tq.Feeder(q, cycle(batches, args.steps)):
            for i in range(args.steps):
                if i == args.steps // 2:
                    trace = q.trace(os.path.join(args.out, "trace.json"), steps=args.traced).start()
                losses.append(float(step()))
            trace.__exit__(None, None, None)
    lines = [line.strip() for line in monitor_text.getvalue().replace("\r", "\n").splitlines() if line.strip()]
    with open(os.path.join(args.out, "monitor.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    summary = {
        "device": theano.config.device,
        "queue": repr(q),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "traced_elements": len(trace.elements),
        "monitor_last_lines": lines[-3:],
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
