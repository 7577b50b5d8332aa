"""Kept: user code written before :mod:`theano_queue.feed` imports these names from here (the old module path).

What a Feeder is given is read in :mod:`theano_queue.feed`; nothing in this
project imports this module but the test that the old paths still work.
"""

from .feed.arrays import GATHER_ENV, GATHER_MECHANISMS
from .feed.sources import is_map_style

__all__ = ["GATHER_ENV", "GATHER_MECHANISMS", "is_map_style"]
