"""What a ring's slots hold, read through a second mapping of its shared staging (Ring.staging_fd): the
evidence that something was written in place (it is there before the commit), or was not staged at all."""

import mmap
import os

import numpy as np


def staging_holds(ring, component, data):
    """True when some slot's staging holds ``data``'s bytes at the start of component ``component``."""
    raw = np.ascontiguousarray(data).tobytes()
    fd = ring.staging_fd()
    try:
        with mmap.mmap(fd, ring.staging_bytes, prot=mmap.PROT_READ) as shared:
            starts = (ring.slot_offset(s) + ring.component_offsets[component] for s in range(ring.capacity))
            return any(shared[start : start + len(raw)] == raw for start in starts)
    finally:
        os.close(fd)
