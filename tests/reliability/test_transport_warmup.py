"""The start-up transport warm-up (``server.transport_warmup``): a real loopback round trip of
a large message, and no request of the service's own."""

from __future__ import annotations

import asyncio

import procs
from sglang_mm_grpc.server.transport_warmup import warm_transport


def test_warm_transport_round_trips_the_bytes():
    assert asyncio.run(warm_transport(3 << 20)) == 3 << 20


def test_a_fresh_server_has_counted_nothing_at_serving(tmp_path):
    """The warm-up runs before SERVING, through its own throwaway server: the service's
    request counters, request log and cache never see it."""
    server = procs.Server(tmp_path, models=[procs.QWEN2])
    try:
        st = server.stats()
        assert dict(st.requests) == {} and st.images == 0 and len(st.statuses) == 0
        assert (st.cache.hits, st.cache.misses, st.cache.items) == (0, 0, 0)  # nor the kernel warm-ups
        log = server.log_text()
        assert "warm-up skipped" not in log and "sglang_mm_grpc.requests" not in log
    finally:
        server.stop()
