"""Small things several test modules use."""
import zlib

import numpy as np

TAGGED = [("data", "float32", (16, 8)), ("tag", "int64", (3,))]


def tagged_element(producer, sequence, rng, rows=16):
    """An element of TAGGED whose tag says who made it, in what order, and the data's CRC."""
    data = rng.standard_normal((rows, 8)).astype("float32")
    return data, np.array([producer, sequence, zlib.crc32(data.tobytes())], dtype="int64")


def check_tagged(data, tag):
    """(producer, sequence) of an element, after checking its data against its CRC."""
    assert zlib.crc32(np.ascontiguousarray(data).tobytes()) == tag[2], "element %s arrived corrupted" % (tag,)
    return int(tag[0]), int(tag[1])
