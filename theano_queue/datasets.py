"""Names kept importable from here; what a Feeder is given is read in :mod:`theano_queue.feed`."""

from .feed.arrays import GATHER_ENV, GATHER_MECHANISMS
from .feed.sources import is_map_style

__all__ = ["GATHER_ENV", "GATHER_MECHANISMS", "is_map_style"]
