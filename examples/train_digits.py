"""Train a small classifier on scikit-learn's digits, fed through a theano_queue.Queue.

    python examples/train_digits.py --epochs 30      # or: make demo, theano-queue demo

The program lives in the package (theano_queue/tools/demo.py) so that an installed
package runs it too; read it there.
"""

from theano_queue.tools.demo import main

if __name__ == "__main__":
    main()
