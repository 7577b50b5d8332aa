"""argparse types for the command's numbers: a bad value is a usage error (exit 2) naming the argument.

argparse turns the ``ArgumentTypeError`` raised here into one line,
``theano-queue demo: error: argument --batch-size: expected an int >= 1, got '0'``,
after the usage line.
"""

import argparse
import math


def int_at_least(minimum, maximum=None):
    """A type for an int argument in ``[minimum, maximum]`` (no upper bound when ``maximum`` is None)."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            expected = "from %d to %d" % (minimum, maximum) if maximum is not None else ">= %d" % minimum
            raise argparse.ArgumentTypeError("expected an int %s, got %r" % (expected, text))
        return value

    parse.__name__ = "int"  # what argparse names in its own messages
    return parse


def positive_float(text):
    """A type for a finite float argument > 0."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("expected a finite number > 0, got %r" % text)
    return value
