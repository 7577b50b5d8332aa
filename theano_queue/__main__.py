"""python -m theano_queue: the theano-queue command (theano_queue/tools/cli.py)."""

import sys

from .tools.cli import main

sys.exit(main())
