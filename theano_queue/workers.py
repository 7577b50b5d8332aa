"""Kept: ``from theano_queue.workers import worker_info`` is the old module path user code still uses.

Worker processes live in :mod:`theano_queue.feed`.
"""

from .feed.info import WorkerInfo, worker_info

__all__ = ["WorkerInfo", "worker_info"]
