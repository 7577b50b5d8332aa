"""The queue itself, with no graph library in it: what a queue holds and how a value becomes its bytes.

* ``queue.py``: :class:`Queue`, the user's object (put, get, close, reopen, dequeue, enqueue).
* ``spec.py``: the components a queue holds (``Component``, ``upto``, ``own``) and elements in their order.
* ``schema.py``: the one rule by which a value becomes a component's slot bytes, and its wording.
* ``layout.py`` and ``varlen.py``: variable-length components laid out as the engine's fixed ones, and back.
* ``target.py``: where a queue's ring lives (host memory or a Theano GPU context).
* ``device_arrays.py``: device arrays (CUDA array interface, DLPack, pygpu) put into and taken out of GPU queues.
* ``port.py``: what a producer holds of a queue (the ring, the put and writer core), not the Queue object.
* ``run.py``: the one owner of a queue's run: the Feeders attached, the reopen count, who closes it.
* ``errors.py``: the exceptions a queue raises.
* ``arguments.py``: checks of numeric arguments, for the API and the command.
* ``paths.py``: where the C sources (c_code/) live, for the Ops compiled at run time.
"""
