"""Kept: ``from theano_queue.feeder import Feeder`` is the old module path user code still uses.

The Feeder lives in :mod:`theano_queue.feed`.
"""

from .feed.feeder import Feeder

__all__ = ["Feeder"]
