"""python -m theano_queue: the theano-queue command (theano_queue/cli.py)."""

import sys

from .cli import main

sys.exit(main())
