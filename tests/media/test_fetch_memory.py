"""A failed fetch frees what it read at once, not when the cyclic GC gets round to it.

A failure raised through the fetcher used to sit in a reference cycle (the error's
traceback held the frame that held the failed task that held the error), keeping every
frame of the failed fetch alive: the body read so far (up to max_remote_bytes), the
decoded inline sources. Repeated hostile requests then held a cap's worth of memory
each until a full collection. The cyclic GC is disabled here to show that refcounting
alone frees it all.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import tracemalloc

import pytest

from fetch_helpers import make_fetcher
from media_servers import closed_port
from sglang_mm_grpc.core.errors import PreprocessError
from sglang_mm_grpc.media import FetchPolicy

MiB = 1 << 20


@pytest.fixture
def no_cyclic_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _fail_repeatedly(sources, policy: FetchPolicy, times: int) -> list[int]:
    """tracemalloc's current size after each failed fetch_all."""
    sizes = []

    async def go():
        async with make_fetcher(policy) as fetcher:
            for _ in range(times):
                with pytest.raises(PreprocessError):
                    await fetcher.fetch_all(sources)
                sizes.append(tracemalloc.get_traced_memory()[0])

    tracemalloc.start()
    try:
        asyncio.run(go())
    finally:
        tracemalloc.stop()
    return sizes


def test_failed_body_is_freed_at_once(origin, no_cyclic_gc):
    sizes = _fail_repeatedly([origin.url("/endless")], FetchPolicy(allow_private_hosts=True, max_remote_bytes=8 * MiB), 4)
    assert max(sizes) < 4 * MiB, [f"{s / MiB:.1f} MiB" for s in sizes]


def test_decoded_inline_sources_are_freed_when_another_fetch_fails(origin, no_cyclic_gc):
    inline = base64.b64encode(bytes(3 * MiB)).decode()
    sizes = _fail_repeatedly([inline, inline, origin.url("/status/404")], FetchPolicy(allow_private_hosts=True), 3)
    assert max(sizes) < 2 * MiB, [f"{s / MiB:.1f} MiB" for s in sizes]


@pytest.mark.parametrize(
    "path",
    ["/endless", "/status/404", "/loop", "/overclaim", "/drip", "bad-base64", "refused-port", "private-redirect"],
)
def test_no_fetcher_frame_is_left_in_a_cycle(origin, no_cyclic_gc, path):
    policy = FetchPolicy(allow_private_hosts=True, max_remote_bytes=MiB, fetch_timeout_s=0.3)
    source = origin.url(path)
    if path == "bad-base64":
        source = "data:image/png;base64,@@@@"
    elif path == "refused-port":
        source = f"http://127.0.0.1:{closed_port()}/a.png"  # ConnectError, mapped by the transport
    elif path == "private-redirect":  # refused where the socket would be opened
        policy = FetchPolicy(allowed_media_domains=("localhost", "127.0.0.1"), max_remote_bytes=MiB)
        source = f"http://localhost:{origin.port}/bytes/100"
    _fail_repeatedly([b"inline", source], policy, 1)
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    frames = {
        f"{o.f_code.co_filename.rsplit('/', 1)[-1]}:{o.f_code.co_name}"
        for o in gc.garbage
        if type(o).__name__ == "frame" and "sglang_mm_grpc" in o.f_code.co_filename
    }
    assert not frames, frames
