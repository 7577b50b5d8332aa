"""The benchmarks of theano_queue: bench/run.py runs the suite (doc/benchmarks.rst).

A package: run its modules from the checkout's root as ``python -m bench.<name>``
(``python bench/run.py`` works too).  Shared helpers live in bench/common.py; the
PyTorch peers (run with a Python that has PyTorch, not Theano) share
bench/torch_prefetch.py.  bench/ab.py runs the real paths (bench/ab_scenarios.py) on two
checkouts taking turns; bench/rounds.py holds the rounds' statistics it and bench/run.py
print; bench/lasagne_mlp.py is Lasagne's MNIST MLP in plain Theano.  Importing the
package imports nothing.
"""
