"""Feeding a queue: one :class:`~.producers.Producer` per kind of source, one checked door, one Feeder.

* :mod:`.feeder`: the :class:`Feeder` (the thread, the lifecycle, the queue's attachment);
* :mod:`.factory`: which producer a Feeder's arguments ask for;
* :mod:`.producers` (fill, iterable, map-style in the Feeder's thread), :mod:`.arrays` (array datasets),
  :mod:`.dispatcher` (worker processes: the parent's side, composed of :mod:`.startup` (their start-up
  bounded and reported), :mod:`.handout` (each slot its batch, each item its worker), :mod:`.watch` (the
  clock on items, the words) and :mod:`.results` (replies, deaths, commits, the failure)), :mod:`.pool`
  (their processes), :mod:`.child` (what runs in them), :mod:`.protocol` (what they say over their pipes),
  :mod:`.payload` (the dataset pickled for them), :mod:`.gil` (the Feeder thread's GIL waits);
* :mod:`.held`: an array dataset held in GPU memory;
* :mod:`.check`: the one door every value passes (``Queue.put``'s rules and messages);
* :mod:`.autotune`: what the self-tuning knobs (``"auto"``) decided, and why; :mod:`.autoworkers`: the
  ``workers="auto"`` rule and its tuner;
* :mod:`.sampler`: which samples go into which batch, epoch after epoch (``theano_queue.sampler`` is its old path);
* :mod:`.tune_capacity`: ``Queue(capacity="auto")``'s rules and thread (the ring's depth, the copy threads);
* :mod:`.sources`, :mod:`.rows`, :mod:`.state`, :mod:`.info`: reading sources, writing rows, resume state,
  :func:`worker_info`.

Nothing here imports theano.
"""

from .factory import make_producer
from .feeder import Feeder
from .info import worker_info
from .producers import Producer

__all__ = ["Feeder", "Producer", "make_producer", "worker_info"]
