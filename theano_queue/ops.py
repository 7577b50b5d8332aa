# Kept: user code imports the Theano Ops from this old path; they live in theano_queue/graph/theano.py.
from .graph.theano import *  # noqa: F403
