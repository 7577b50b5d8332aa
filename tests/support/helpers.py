"""Small things several test modules use."""

import importlib.util
import os
import select
import signal
import subprocess
import sys
import threading
import time
import zlib

import numpy as np
from timing import scaled

import theano_queue as tq

TAGGED = [("data", "float32", (16, 8)), ("tag", "int64", (tq.own(3),))]  # the tag is no row of the batch


def tagged_element(producer, sequence, rng, rows=16):
    """An element of TAGGED whose tag says who made it, in what order, and the data's CRC."""
    data = rng.standard_normal((rows, 8)).astype("float32")
    return data, np.array([producer, sequence, zlib.crc32(data.tobytes())], dtype="int64")


def check_tagged(data, tag):
    """(producer, sequence) of an element, after checking its data against its CRC."""
    assert zlib.crc32(np.ascontiguousarray(data).tobytes()) == tag[2], "element %s arrived corrupted" % (tag,)
    return int(tag[0]), int(tag[1])


def two_producers_exactly_once(q, take, per_producer):
    """Two threads put per_producer tagged elements each into q; take() takes them.

    Checks that every element arrives once, intact, and in its producer's order.
    """

    def produce(producer):
        rng = np.random.default_rng(producer)
        for sequence in range(per_producer):
            q.put(*tagged_element(producer, sequence, rng, rows=1 + sequence % 16))

    threads = [threading.Thread(target=produce, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    last = {0: -1, 1: -1}
    try:
        for _ in range(2 * per_producer):
            producer, sequence = check_tagged(*take())
            assert sequence == last[producer] + 1, "producer %d: %d after %d" % (producer, sequence, last[producer])
            last[producer] = sequence
    finally:
        q.close(cancel_pending=True)  # a failed check must not leave a producer blocked
        for t in threads:
            t.join()
    assert last == {0: per_producer - 1, 1: per_producer - 1}


# Far beyond any wait the tests promise: only a process that never stops reaches it.
HANG_GUARD_S = scaled(120)


#: Put before a Ctrl-C script: a process started with SIGINT ignored (a job a shell ran in the background
#: without job control) passes that on, and Python then never raises KeyboardInterrupt.  The script gets
#: what a terminal's program has, whatever started the test run.
INTERRUPTIBLE = "import signal as _signal\n_signal.signal(_signal.SIGINT, _signal.default_int_handler)\n"


def seconds_to_stop_on_ctrl_c(script, env, group=False):
    """Run script, which prints "ready" and then blocks; send it SIGINT; time until the interrupt took effect.

    The script must exit with status 3 once KeyboardInterrupt reaches it.
    Where it prints a line when it catches the interrupt ("interrupted"),
    the time is until that line: what Ctrl-C promises, without the
    interpreter's exit, which a loaded machine makes as slow as it likes.
    Otherwise it is until the process ends.  A process that never stops
    fails after HANG_GUARD_S.
    With group, the script runs in a process group of its own and SIGINT goes
    to the whole group, as a terminal's Ctrl-C does (its child processes get
    it too).
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTIBLE + script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=group,
    )
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()[-3000:]
        time.sleep(0.5)  # let it block
        assert proc.poll() is None, "it did not block"
        sent = time.monotonic()
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        readable, _, _ = select.select([proc.stdout], [], [], HANG_GUARD_S)
        assert readable, "no sign of the interrupt %d s after SIGINT" % HANG_GUARD_S
        proc.stdout.readline()  # "interrupted", or "" at the end of the output
        elapsed = time.monotonic() - sent
        proc.wait(timeout=HANG_GUARD_S)
    finally:
        proc.kill()
    assert proc.returncode == 3, proc.stderr.read()[-3000:]
    return elapsed


def stop_wakes_a_feeder_waiting_for_space(q, feeder):
    """Starts feeder on q (capacity 1), lets it block on the full queue, stops it: True when it ended at once."""
    feeder.start()
    while q.size() < 1:
        time.sleep(0.01)
    time.sleep(0.1)  # the feeder waits for space
    start = time.monotonic()
    feeder.stop()
    assert feeder.join(timeout=1)
    return time.monotonic() - start < 0.04


def holding_the_gil(seconds, then):
    """Runs Python in this thread for ``seconds`` without letting another thread take the GIL, then then().

    Returns then()'s result, taken before the GIL can change hands: what
    threads that need no GIL did meanwhile.  (A thread waiting for the GIL
    gets it after the switch interval, set here far beyond ``seconds``.)
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return then()
    finally:
        sys.setswitchinterval(interval)


def load_example(name):
    """examples/<name>.py as a module, so a test calls its main() in this process."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "examples", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def put_waiting_for_room(q, fill, element):
    """Puts ``fill`` (as many elements as q holds), then starts a thread whose put of ``element`` waits for room.

    Returns the thread once its put is waiting.
    """
    for value in fill:
        q.put(value)
    waiting = threading.Thread(target=q.put, args=(element,), kwargs={"timeout": 30})
    waiting.start()
    deadline = time.monotonic() + 10
    while q.stats()["producer_wait_s"] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)  # until the put waits for room
    time.sleep(0.02)
    return waiting


def drain(q, timeout=60, **get_args):
    """Every element q.get() gives until the queue is closed and drained."""
    got = []
    while True:
        try:
            got.append(q.get(timeout=timeout, **get_args))
        except tq.QueueClosed:
            return got
