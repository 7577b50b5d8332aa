"""A training script as users write it (tests/cpu/test_worker_pickling.py runs it): a dataset class in __main__
that reads a module-level memory map, next to a module-level lock it does not hold.

    python worker_memmap_script.py DATA.npy START_METHOD  ->  one JSON line: payload bytes, worker RSS
"""

import json
import sys
import threading

import numpy as np

import theano_queue as tq

DATA = np.load(sys.argv[1], mmap_mode="r")
LOCK = threading.Lock()  # module state the dataset does not hold: it must not stop the dataset pickling


class Rows:
    def __len__(self):
        return len(DATA)

    def __getitem__(self, i):
        return (DATA[i],)


def memory_kib(pid):
    """VmRSS, RssAnon (private memory: where a copy of the data would be) and RssFile, from /proc."""
    with open("/proc/%d/status" % pid) as f:
        fields = dict(line.split(":", 1) for line in f)
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "RssAnon", "RssFile")}


if __name__ == "__main__":
    q = tq.Queue([("x", DATA.dtype.name, (16,) + DATA.shape[1:])], capacity=2, target="cpu", timeout=60)
    # Two epochs, the RSS read after the first: every row read (the map's pages count in both start methods),
    # and the worker still has work, so it is running.
    with tq.Feeder(q, Rows(), workers=1, start_method=sys.argv[2], epochs=2) as feeder:
        for _ in range(feeder.batches_per_epoch + 1):
            q.get()
        stats = feeder.stats()
        print(json.dumps(dict(payload_bytes=stats["payload_bytes"], **memory_kib(stats["pids"][0]))))
