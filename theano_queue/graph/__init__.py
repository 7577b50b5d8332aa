"""The graph side of a queue: the Ops that dequeue and enqueue inside a compiled function.

* ``base.py``: what both front ends share (the front-end interface, enqueue checks, the rings' registry by key).
* ``theano.py``: Theano's front end: Dequeue and Enqueue (C in c_code/ops/), their ordering, the token.
* ``theano_gpu.py``: Theano's GPU Ops and the optimizer that lifts a GPU queue's Ops onto the device.
* ``pytensor.py``: PyTensor's front end: the same C under PyTensor's C linker, ``perform`` under Numba.

Nothing here is imported until a graph is built: the core and the feeding side import no graph library.
"""
