"""bench/step_profile.py: a small step fed at other copy-pool sizes, taking turns with the rest (issue 43.1)."""

from bench.step_profile import profile
from theano_queue import _engine


def test_copy_thread_turns_add_array_and_iterable_rows_and_give_the_pool_back():
    """Each pool size named adds its own array and iterable rows; the pool is the process's again afterwards."""
    threads = _engine.copy_threads()
    result = profile(16, 8, hidden=8, steps=4, rounds=2, switch_intervals=(), trace=0, copy_thread_turns=(1, 3))
    rows = {r["part"]: r for r in result["rows"]}
    turns = ["array, 1 copy thread", "iterable, 1 copy thread", "array, 3 copy threads", "iterable, 3 copy threads"]
    assert list(rows)[-4:] == turns
    for name in turns:
        assert rows[name]["us/step"] > 0 and rows[name]["x resident"] > 0
    assert _engine.copy_threads() == threads
