"""Checks of numeric arguments: :func:`seconds` for the API's, and argparse types for the command's
numbers, where a bad value is a usage error (exit 2) naming the argument.

argparse turns the ``ArgumentTypeError`` raised here into one line,
``theano-queue demo: error: argument --batch-size: expected an int >= 1, got '0'``,
after the usage line.
"""

import argparse
import math
import numbers
from typing import Any


def seconds(value: Any, what: str, meaning: str) -> float:
    """``value`` as a finite number of seconds >= 0; else ValueError naming ``what`` (the call and parameter)
    and what it means."""
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not 0 <= number < math.inf:
        raise ValueError("%s must be a number of seconds >= 0 (%s), got %r" % (what, meaning, value))
    return number


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
