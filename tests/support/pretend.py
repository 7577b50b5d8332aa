"""A host queue passed off as a GPU queue, in one visible place: the Feeder's GPU-only choices (the device
gather, held datasets) run on the CPU against a ring that stays in host memory.  Everything a test pretends goes
through Queue._pretend_target, the one seam theano_queue keeps for it."""

from theano_queue.core.target import Target


def pretend_gpu(q):
    """``q`` (a host queue) reporting Theano's default GPU as its target; returns ``q``."""
    q._pretend_target(Target("gpu", True))
    return q
