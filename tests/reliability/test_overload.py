"""Overload: past ``--max-in-flight`` new requests are refused at once with
RESOURCE_EXHAUSTED instead of queueing, health and GetStats keep answering, and once
the burst is over the server is healthy and as fast as before."""

from __future__ import annotations

import asyncio
import statistics
import time

import grpc
import pytest

import imagegen
import procs
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

LIMIT = 4
BURST = 96


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = procs.Server(
        tmp_path_factory.mktemp("overload"), "--max-in-flight", str(LIMIT), "--cache-bytes", "0",
        "--log-level", "WARNING", models=[procs.QWEN2],
    )
    yield s
    s.stop()


def request(image: bytes, backend=pb.BACKEND_VLLM) -> pb.PreprocessRequest:
    return pb.PreprocessRequest(model=procs.QWEN2, images=[pb.MediaItem(data=image)], backend=backend)


def small_latency(stub, req, n=10) -> float:
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        stub.Preprocess(req, timeout=30)
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


async def burst(target: str, reqs) -> tuple[list, list]:
    """Every request at once on one channel; (code, seconds, details) per request, and
    the GetStats and health answers taken while the burst was in progress."""
    async with grpc.aio.insecure_channel(target, options=procs.CHANNEL_OPTIONS) as ch:
        stub = pb_grpc.MultimodalPreprocessorStub(ch)

        async def one(req):
            t = time.perf_counter()
            try:
                await stub.Preprocess(req, timeout=60)
                return "OK", time.perf_counter() - t, ""
            except grpc.aio.AioRpcError as e:
                return e.code().name, time.perf_counter() - t, e.details()

        async def watch():
            seen = []
            for _ in range(20):
                t = time.perf_counter()
                st = await stub.GetStats(pb.GetStatsRequest(), timeout=5)
                seen.append((st.in_flight, time.perf_counter() - t))
                await asyncio.sleep(0.02)
            return seen

        watcher = asyncio.ensure_future(watch())
        results = await asyncio.gather(*(one(r) for r in reqs))
        return results, await watcher


def test_burst_is_refused_at_once_then_server_recovers(server):
    small = request(imagegen.png(64, 64, seed=1))
    with grpc.insecure_channel(server.target, options=procs.CHANNEL_OPTIONS) as ch:
        stub = pb_grpc.MultimodalPreprocessorStub(ch)
        before = small_latency(stub, small)
        rejected_before = stub.GetStats(pb.GetStatsRequest()).rejected_busy

        image = imagegen.jpeg(768, 1024, seed=7)  # the cache is off: every copy is full work
        big = [request(image) for _ in range(BURST)]
        results, watched = asyncio.run(burst(server.target, big))

        codes = [c for c, _, _ in results]
        assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, set(codes)
        ok = [t for c, t, _ in results if c == "OK"]
        busy = [(t, d) for c, t, d in results if c == "RESOURCE_EXHAUSTED"]
        assert len(ok) >= LIMIT and len(busy) >= BURST // 3, (len(ok), len(busy))
        assert all("server busy" in d and f"limit {LIMIT}" in d and "retry" in d for _, d in busy)
        # Refused at once: far faster than the accepted ones, which did the work.
        assert statistics.median(t for t, _ in busy) < statistics.median(ok)
        assert max(t for t, _ in busy) < 2.0
        # Never more than the limit in flight; monitoring answered throughout.
        assert max(n for n, _ in watched) <= LIMIT
        assert max(t for _, t in watched) < 2.0

        st = stub.GetStats(pb.GetStatsRequest())
        assert st.rejected_busy - rejected_before == len(busy)
        assert procs.wait_until(lambda: server.stats().in_flight == 0, 10)
        assert server.health() == "SERVING"
        after = small_latency(stub, small)
        assert after < 3 * before + 0.05, (before, after)


def test_assemble_is_limited_too_and_release_is_not(server):
    """Assemble does CPU work and takes a slot; Release, ListModels and GetStats never
    do, so a router can always clean up and look."""

    async def main():
        async with grpc.aio.insecure_channel(server.target, options=procs.CHANNEL_OPTIONS) as ch:
            stub = pb_grpc.MultimodalPreprocessorStub(ch)
            kept = await stub.Preprocess(request(imagegen.jpeg(600, 800, seed=99), backend=0), timeout=30)
            heavy = request(imagegen.jpeg(768, 1024, seed=8))
            heavy.images.extend([heavy.images[0]] * 5)  # 6 images: the slots stay taken a while
            tasks = [asyncio.ensure_future(stub.Preprocess(heavy, timeout=60)) for _ in range(LIMIT)]
            for _ in range(500):  # until every slot is taken
                if (await stub.GetStats(pb.GetStatsRequest(), timeout=5)).in_flight == LIMIT:
                    break
                await asyncio.sleep(0.01)
            assemble = [stub.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_SGLANG), timeout=30) for _ in range(8)]
            side = [stub.ListModels(pb.ListModelsRequest(), timeout=5), stub.GetStats(pb.GetStatsRequest(), timeout=5)]
            out = await asyncio.gather(*assemble, *side, return_exceptions=True)
            released = await stub.Release(pb.ReleaseRequest(handle=kept.handle), timeout=5)
            await asyncio.gather(*tasks, return_exceptions=True)
            return out, released

    out, released = asyncio.run(main())
    codes = [o.code().name if isinstance(o, grpc.aio.AioRpcError) else "OK" for o in out]
    assert set(codes[:8]) <= {"OK", "RESOURCE_EXHAUSTED"} and "RESOURCE_EXHAUSTED" in codes[:8], codes
    assert codes[8:] == ["OK", "OK"]
    assert released.released
    assert procs.wait_until(lambda: server.stats().in_flight == 0, 10)
