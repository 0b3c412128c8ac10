"""The handle store: byte and count bounds, TTL, LRU order, reasons, thread safety."""

from __future__ import annotations

import threading

import pytest

from sglang_mm_grpc.service.handles import EVICTED, EXPIRED, RELEASED, UNKNOWN, HandleStore, TooLarge


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def store(max_bytes=100, max_items=10, ttl=10.0, clock=None):
    return HandleStore(max_bytes, max_items, ttl, clock=clock or Clock())


def test_put_get_pop():
    s = store()
    h = s.put("a", 10)
    assert s.get(h) == "a" and len(s) == 1 and s.stats().bytes == 10
    assert s.pop(h) == "a" and s.get(h) is None and s.why_missing(h) == RELEASED
    assert s.pop(h) is None and s.stats().bytes == 0


def test_handles_are_unique_and_opaque():
    s = store(max_items=1000, max_bytes=10**6)
    handles = {s.put(i, 1) for i in range(500)}
    assert len(handles) == 500 and all(len(h) == 32 for h in handles)


def test_count_bound_evicts_least_recently_used():
    s = store(max_items=3)
    a, b, c = s.put("a", 1), s.put("b", 1), s.put("c", 1)
    assert s.get(a) == "a"  # a is now the most recent; b is the oldest
    d = s.put("d", 1)
    assert s.get(b) is None and s.why_missing(b) == EVICTED
    assert [s.get(h) for h in (a, c, d)] == ["a", "c", "d"]
    assert s.stats().evicted == 1


def test_byte_bound_evicts_until_it_fits():
    s = store(max_bytes=100)
    h1, h2, h3 = s.put(1, 40), s.put(2, 40), s.put(3, 10)
    h4 = s.put(4, 60)  # needs 50 more: evicts h1 (40) and h2 (40)
    assert s.get(h1) is None and s.get(h2) is None
    assert s.get(h3) == 3 and s.get(h4) == 4 and s.stats().bytes == 70


def test_entry_larger_than_the_store():
    s = store(max_bytes=100)
    h = s.put("small", 10)
    with pytest.raises(TooLarge):
        s.put("huge", 101)
    assert s.get(h) == "small"  # nothing was evicted for it


def test_ttl_expires_and_use_extends():
    clock = Clock()
    s = store(ttl=10.0, clock=clock)
    a, b = s.put("a", 1), s.put("b", 1)
    clock.t += 8
    assert s.get(a) == "a"  # refreshed: lives until t+18
    clock.t += 5  # b (put at t) is past its TTL
    assert s.get(b) is None and s.why_missing(b) == EXPIRED
    assert s.get(a) == "a"
    clock.t += 10.5
    assert s.sweep() == 1 and s.why_missing(a) == EXPIRED and len(s) == 0


def test_expired_entries_go_before_live_ones_are_evicted():
    clock = Clock()
    s = store(max_items=2, ttl=10.0, clock=clock)
    old = s.put("old", 1)
    clock.t += 5
    live = s.put("live", 1)
    clock.t += 6  # old expired, live not
    new = s.put("new", 1)
    assert s.why_missing(old) == EXPIRED and s.get(live) == "live" and s.get(new) == "new"


def test_pop_of_expired_entry():
    clock = Clock()
    s = store(ttl=1.0, clock=clock)
    h = s.put("x", 1)
    clock.t += 2
    assert s.pop(h) is None and s.why_missing(h) == EXPIRED


def test_unknown_handle():
    assert store().why_missing("nope") == UNKNOWN


def test_bad_limits():
    with pytest.raises(ValueError):
        HandleStore(0, 1, 1)


def test_threads_keep_the_bounds():
    s = HandleStore(max_bytes=5000, max_items=50, ttl_s=60)
    errors = []

    def work(k):
        try:
            mine = []
            for i in range(400):
                h = s.put((k, i), 1 + (i % 97))
                mine.append(h)
                v = s.get(mine[i // 2])
                assert v is None or v[0] == k
                if i % 7 == 0:
                    s.pop(mine[i // 3])
                st = s.stats()
                assert st.items <= 50 and st.bytes <= 5000
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    st = s.stats()
    assert st.items == len(s) <= 50 and 0 <= st.bytes <= 5000
