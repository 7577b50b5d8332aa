"""Does the feeder keep the queue full while the training loop reads its loss
back every step (a synchronous device-to-host read with the GIL held around it)?

    python -m bench.keepup [--rows 4096 --cols 1024 --steps 300]

Trains a 3-layer MLP (forward, backward, SGD) on batches the Feeder takes from
ordinary numpy arrays (the source yields them; the feeder copies them into the
queue).  Reports, with the loss read every step and every 100 steps, the step
time, the time the model waited for data, and how full the queue was.
"""

import argparse
import json
import time

import numpy as np
import theano

import theano_queue as tq  # noqa: E402
from bench.common import mlp_train_step  # noqa: E402


def run(read_every, args, rng):
    rows, cols = args.rows, args.cols
    pool = [rng.standard_normal((rows, cols)).astype("float32") for _ in range(4)]
    labels = rng.integers(0, 10, rows).astype("int32")
    q = tq.Queue([("x", "float32", (rows, cols)), ("y", "int32", (rows,))], capacity=args.capacity, name="keepup")
    x, y = q.dequeue()
    loss, updates = mlp_train_step(x, y, cols, args.hidden, 10, rng)
    train = theano.function([], loss, updates=updates)

    def source():
        for i in range(args.steps + 10):
            yield pool[i % len(pool)], labels

    fill = []
    with tq.Feeder(q, source()):
        for _ in range(10):  # warm-up
            float(train())
        waited_before = q.stats()["consumer_wait_s"]
        started = time.perf_counter()
        for step in range(args.steps):
            value = train()
            fill.append(q.size())
            if step % read_every == 0:
                float(np.asarray(value))
        float(np.asarray(value))
        elapsed = time.perf_counter() - started
    waited = q.stats()["consumer_wait_s"] - waited_before
    return {
        "read_loss_every": read_every,
        "step_ms": 1e3 * elapsed / args.steps,
        "model_waited_fraction": waited / elapsed,
        "mean_fill": float(np.mean(fill)),
        "batch_GBps": args.steps * rows * cols * 4 / elapsed / 1e9,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--capacity", type=int, default=3)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    results = [run(every, args, rng) for every in (1, 100)]
    print(json.dumps({"device": theano.config.device, "batch": [args.rows, args.cols], "runs": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
