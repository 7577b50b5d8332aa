"""The Feeder (kept importable from here; it lives in :mod:`theano_queue.feed`)."""

from .feed.feeder import Feeder

__all__ = ["Feeder"]
