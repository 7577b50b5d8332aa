# The sampler moved into theano_queue/feed/ (its one user); kept so `from theano_queue.sampler import Sampler` works.
from .feed.sampler import *  # noqa: F401,F403
