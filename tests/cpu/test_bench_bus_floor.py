"""bench/bus_floor.py: where a batch's time goes, read from a queue's trace (issue 43.3)."""

import pytest

from bench.bus_floor import stage_medians


def element(n, begin_ms, write_ms, upload_ms):
    """A traced element: put_begin at begin_ms, reserved 0.5 ms later, the write, the upload issued at once."""

    def ms(t):
        return int(t * 1e6)

    reserved = begin_ms + 0.5
    put_end = reserved + write_ms
    return {
        "element": n,
        "slot": n % 3,
        "ns": {
            "put_begin": ms(begin_ms),
            "reserved": ms(reserved),
            "put_end": ms(put_end),
            "copy_issued": ms(put_end),
            "ready": ms(put_end),
            "filled": ms(put_end + upload_ms),
        },
    }


def test_stage_medians_of_a_trace():
    """Batches made ready every 7 ms, written in 6.5 (the slower stage) and uploaded in 5: the medians say so."""
    elements = [element(n, 7 * n, 6.5, 5) for n in range(5)]
    elements[2] = element(2, 14, 6.5, 9)  # one slow upload does not move a median
    stages = stage_medians(elements)
    assert stages["period"] == pytest.approx(7)
    assert stages["write"] == pytest.approx(6.5)
    assert stages["upload"] == pytest.approx(5)
    assert stages["wait for room"] == pytest.approx(0.5)


def test_stage_medians_of_a_host_queue_have_no_upload():
    elements = [element(n, 2 * n, 1, 0) for n in range(3)]
    for e in elements:
        del e["ns"]["filled"]  # a host ring records no upload
    assert stage_medians(elements)["upload"] is None
    assert stage_medians([])["period"] is None


def test_memory_kinds_take_turns_and_are_set_against_pinned_memory(monkeypatch):
    """The kinds alternate within each round (a drifting machine moves them alike), and each one's median is
    set against pinned memory's."""
    import bench.bus_floor as floor

    order = []
    rates = {"pinned": iter([50, 56, 55]), "shared": iter([44, 40, 48])}

    def fake_dma(nbytes, memory):
        order.append(memory)
        return next(rates[memory])

    monkeypatch.setattr(floor, "dma_gbps", lambda nbytes, seconds=1.0, memory="pinned": fake_dma(nbytes, memory))
    monkeypatch.setattr(floor, "huge_page_share", lambda nbytes, kind: 0.25)
    writes = iter([9.0, 12.0, 10.0])
    monkeypatch.setattr(floor, "host_write_gbps", lambda nbytes, kind, repeats: next(writes))
    rows = floor.by_memory(1, ["pinned", "shared"], rounds=3)
    assert order == ["pinned", "shared"] * 3
    assert rows[0] == {"memory": "pinned", "gbps": 55, "x pinned": 1.0, "huge pages": None, "write gbps": None}
    assert rows[1]["gbps"] == 44 and rows[1]["x pinned"] == pytest.approx(44 / 55) and rows[1]["huge pages"] == 0.25
    assert rows[1]["write gbps"] == 10.0  # the median of the shared mapping's three writes
    assert floor.memory_lines(rows)[2].split() == ["shared", "44.0", "0.800", "25%", "10.0"]
