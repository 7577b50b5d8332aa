"""Bounds in seconds, scaled to the machine's load (``TQ_TEST_TIME_SCALE``, set by conftest.py).

Timeouts that only stop a hung test (a subprocess's, a ``q.get``'s) and the
few bounds the tests assert as such (a start-up hang failing "within 5 s")
are written as ``scaled(5)``: on a loaded machine they stretch, on an idle
one they are what they say.  Speed itself is never asserted in seconds:
benchmarks compare ratios.
"""

import os

SCALE = max(1.0, float(os.environ.get("TQ_TEST_TIME_SCALE", "1") or 1))


def scaled(seconds: float) -> float:
    return seconds * SCALE
