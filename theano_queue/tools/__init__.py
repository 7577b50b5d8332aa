"""What a user runs or watches beside training.

* ``cli.py``: the ``theano-queue`` command (``info``, ``probe``, ``demo``, ``bench``), also ``python -m theano_queue``.
* ``probe.py``: this machine's data paths measured: host-to-device and host copy bandwidth.
* ``monitor.py``: a live view of a queue while training runs, and its verdict (input-, compute- or GIL-bound).
* ``trace.py``: a timeline of a queue's elements as Chrome trace-event JSON.
* ``stall.py``: a dequeue or put that waits long says so, naming what each Feeder is doing.
* ``demo.py``: a small classifier on scikit-learn's digits, fed through a queue (``theano-queue demo``).
"""
