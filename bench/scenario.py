"""What every scenario of bench/run.py is given (Bench: one run's sizes and shared results) and how one is
declared (@scenario)."""

import numpy as np

import theano_queue as tq
from bench.common import MiB


class Bench:
    """Shared state of one run: sizes, the GPU context, results of earlier scenarios."""

    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.rng = np.random.default_rng(0)
        self.results = {}
        self.on_gpu = tq.Queue([("x", "float32", (1,))]).on_gpu
        if self.on_gpu:
            from theano.gpuarray.type import get_context

            self.context = get_context(None)

    def sizes_mib(self):
        return [4, 16] if self.quick else [4, 16, 64, 256]

    def steps_for(self, nbytes, total_mib=2048, least=8):
        total = 256 if self.quick else total_mib
        return max(least, int(total * MiB / nbytes))


def scenario(number, title, needs_gpu=True, needs=()):
    """Declares scenario ``number``; ``needs``: the scenarios whose results (on Bench) it reads, run with it."""

    def register(fn):
        fn.number, fn.title, fn.needs_gpu, fn.needs = number, title, needs_gpu, tuple(needs)
        return fn

    return register
