"""worker_info (kept importable from here; worker processes live in :mod:`theano_queue.feed`)."""

from .feed.info import WorkerInfo, worker_info

__all__ = ["WorkerInfo", "worker_info"]
