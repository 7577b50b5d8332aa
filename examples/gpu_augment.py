"""Augmentation on the GPU with pycuda, feeding a queue that a Theano training step consumes.

    THEANO_FLAGS=device=cuda0 python examples/gpu_augment.py [--steps 300]

The dataset (uint8 images) is uploaded to the GPU once.  A producer thread
makes each batch there with one pycuda ``ElementwiseKernel`` (a random 32x32
crop of the 40x40 images, a random horizontal flip, uint8 to float32) on a
stream of its own, and puts it into the queue with ``stream=``: the queue
copies it device to device after the kernel, and the stream waits for that
copy before the next kernel overwrites the buffer.  Neither the batch nor the
host ever waits for the other.  The task: is the bright blob in the left half?
A flip moves the blob, so the label flips with the image.

Needs pycuda (``pip install 'theano_queue[pycuda]'``; it builds against a CUDA
toolkit) and Theano on a GPU.  It says so and exits otherwise.
"""

import argparse
import sys
import threading

import numpy as np

SIDE, CROP, BATCH = 40, 32, 128

AUGMENT = """
int b = i / (CROP * CROP), r = (i / CROP) % CROP, c = i % CROP;
int col = flip[b] ? CROP - 1 - c : c;
out[i] = images[(long)index[b] * SIDE * SIDE + (r + dy[b]) * SIDE + col + dx[b]] / 255.0f;
"""


def blob_images(n, rng):
    """uint8 images with a bright blob in the left (label 1) or right (label 0) half, and their labels."""
    images = rng.integers(0, 60, (n, SIDE, SIDE), dtype=np.uint8)
    labels = rng.integers(0, 2, n).astype(np.int32)
    for k in range(n):
        row = rng.integers(4, SIDE - 12)
        col = rng.integers(4, SIDE // 2 - 12) if labels[k] else rng.integers(SIDE // 2 + 4, SIDE - 12)
        images[k, row : row + 8, col : col + 8] = 230
    return images, labels


def require_gpu_and_pycuda():
    import theano_queue as tq

    if not tq.Queue([("x", "float32", (1,))]).on_gpu:
        sys.exit("gpu_augment: Theano does not run on a GPU here; run with THEANO_FLAGS=device=cuda0")
    try:
        import pycuda.autoprimaryctx  # noqa: F401  (the device's primary context, which Theano's libgpuarray uses)
    except ImportError:
        sys.exit("gpu_augment: needs pycuda: pip install 'theano_queue[pycuda]' (it builds against a CUDA toolkit)")
    except Exception as exc:
        sys.exit("gpu_augment: pycuda cannot use the GPU: %s" % exc)


def produce(q, images_gpu, labels, steps, seed, errors):
    """The producer thread: pycuda's context pushed around the batches, then the queue closed."""
    import pycuda.autoprimaryctx as primary

    primary.context.push()  # pycuda's context is current only where it is pushed
    try:
        augment_into(q, images_gpu, labels, steps, seed)
    except Exception as exc:  # the training loop reports it
        errors.append(exc)
        q.fail(exc)
    finally:
        primary.context.pop()
    q.close()


def augment_into(q, images_gpu, labels, steps, seed):
    """One kernel per batch on a stream of its own, each batch put with that stream.

    Every pycuda object made here is freed when this returns, in this thread,
    while pycuda's context is still pushed.
    """
    import pycuda.driver as drv
    import pycuda.gpuarray as gpuarray
    from pycuda.elementwise import ElementwiseKernel

    augment = ElementwiseKernel(
        "float *out, const unsigned char *images, const int *index, const int *dy, const int *dx, const int *flip",
        AUGMENT,
        "augment",
        preamble="#define CROP %d\n#define SIDE %d\n" % (CROP, SIDE),
    )
    stream = drv.Stream()
    out = gpuarray.empty((BATCH, CROP * CROP), np.float32)
    rng = np.random.default_rng(seed)
    n = len(labels)
    for _ in range(steps):
        index = rng.integers(0, n, BATCH).astype(np.int32)
        dy, dx = (rng.integers(0, SIDE - CROP + 1, BATCH).astype(np.int32) for _ in range(2))
        flip = rng.integers(0, 2, BATCH).astype(np.int32)
        params = [gpuarray.to_gpu_async(a, stream=stream) for a in (index, dy, dx, flip)]
        augment(out, images_gpu, *params, stream=stream)
        y = gpuarray.to_gpu_async((labels[index] ^ flip).astype(np.int32), stream=stream)
        # Ordered after the kernel on `stream`; `stream` then waits for the
        # queue's copy, so the next kernel may overwrite `out` at once.
        q.put(out, y, stream=stream)
    stream.synchronize()  # the small parameter arrays are freed only after their last use


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--images", type=int, default=4096)
    args = parser.parse_args(argv)
    require_gpu_and_pycuda()

    import pycuda.gpuarray as gpuarray
    import theano
    import theano.tensor as T

    import theano_queue as tq

    rng = np.random.default_rng(0)
    images, labels = blob_images(args.images, rng)
    images_gpu = gpuarray.to_gpu(images.reshape(len(images), -1))

    q = tq.Queue([("x", "float32", (BATCH, CROP * CROP)), ("y", "int32", (BATCH,))], capacity=4, name="augmented")
    x, y = q.dequeue()
    w = theano.shared(np.zeros((CROP * CROP, 2), np.float32), name="w")
    bias = theano.shared(np.zeros(2, np.float32), name="b")
    p = T.nnet.softmax(T.dot(x - np.float32(0.25), w) + bias)
    loss = T.nnet.categorical_crossentropy(p, y).mean()
    accuracy = T.eq(p.argmax(axis=1), y).mean()
    lr = np.float32(0.05)
    gradients = T.grad(loss, (w, bias))
    step = theano.function([], [loss, accuracy], updates=[(v, v - lr * g) for v, g in zip((w, bias), gradients)])

    errors = []
    producer = threading.Thread(target=produce, args=(q, images_gpu, labels, args.steps, 1, errors), daemon=True)
    producer.start()
    recent = []
    for k in range(args.steps):
        value, acc = step()
        recent = (recent + [float(acc)])[-50:]
        if (k + 1) % 50 == 0:
            print("step %4d  loss %.3f  accuracy (last 50) %.3f" % (k + 1, value, np.mean(recent)), flush=True)
    producer.join()
    if errors:
        raise errors[0]
    print(
        "queue:",
        {k: v for k, v in q.stats().items() if k in ("enqueued", "dequeued", "producer_wait_s", "consumer_wait_s")},
    )
    return float(np.mean(recent))


if __name__ == "__main__":
    main()
