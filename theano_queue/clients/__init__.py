"""Training libraries fed from a queue.

* ``keras.py``: Keras 2.3.1 on Theano trained from a queue (imported as ``theano_queue.keras``, before keras).
* ``pymc.py``: PyMC 5 models on PyTensor fed from a queue (``swap``, ``check_model``, ``StopWhenDrained``).
"""
