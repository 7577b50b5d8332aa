"""The slot layout is the engine's own (c_code/engine/core/tq_ring.h, TQ_ALIGN): Python sizes rings with the engine's
export (_engine.SLOT_ALIGN, _engine.slot_bytes), never with a copy of the rule."""

import numpy as np

from theano_queue import _engine
from theano_queue.core import target
from theano_queue.core.spec import Component

SPEC = [("x", "float32", (3, 5)), ("y", "int8", (7,)), ("z", "float64", ()), ("w", "uint8", (300, 2))]


def aligned(nbytes):
    return -(-nbytes // _engine.SLOT_ALIGN) * _engine.SLOT_ALIGN


def test_slot_bytes_is_the_layout_a_ring_has():
    ring = _engine.Ring("layout", SPEC, 2)
    offsets = ring.component_offsets
    sizes = [aligned(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize) for _, dtype, shape in SPEC]
    assert list(offsets) == list(np.cumsum([0] + sizes[:-1]))
    assert _engine.slot_bytes(SPEC) == offsets[-1] + sizes[-1]
    assert _engine.slot_bytes([]) == _engine.SLOT_ALIGN  # an element of nothing still takes a boundary


def test_target_sizes_rings_through_the_engine():
    components = [Component(name, np.dtype(dtype), shape) for name, dtype, shape in SPEC]
    assert target.ring_bytes(components, 5) == 5 * _engine.slot_bytes(SPEC)
    assert target.SLOT_ALIGN == _engine.SLOT_ALIGN
