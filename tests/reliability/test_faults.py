"""Faults around the service: a backend dies mid-run, fetch servers hang, reset or
dribble, SIGTERM arrives under load, and the server is restarted on the same port."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import grpc
import pytest

import badhttp
import imagegen
import loadgen
import procs
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc


def test_backend_killed_mid_run_does_not_disturb_the_service(tmp_path):
    """The service never calls a backend: a dead vLLM stub fails only the router's
    forwarding to it; every call to the service succeeds, and the restarted stub works."""
    stubs = procs.start_stubs(tmp_path)
    server = procs.Server(tmp_path, "--log-level", "WARNING", models=[procs.QWEN2, procs.PIXTRAL])
    try:
        load = loadgen.Load(
            server, models=[procs.QWEN2, procs.PIXTRAL], clients=12, duration_s=4.5, stubs=stubs,
            images=loadgen.corpus(12), flows=(("oneshot", 0.2), ("twophase", 0.2), ("forward", 0.6)), sample_every=0.2,
        )
        results = {}
        runner = threading.Thread(target=lambda: results.update(r=load.run()))
        runner.start()
        time.sleep(1.5)
        stubs["vllm"].kill()
        time.sleep(1.5)
        stubs["vllm"] = stubs["vllm"].restart(tmp_path)
        runner.join(60)
        r = results["r"]
        assert not r.service_errors, r.error_examples
        assert r.backend_errors and {b for b, _ in r.backend_errors} == {"vllm"}, r.backend_errors
        assert {c for _, c in r.backend_errors} <= {"UNAVAILABLE"}
        assert r.flows["forward"] > 0 and r.ok > 20
        # Flows kept completing while the stub was down (the other backends, and the service).
        done_while_down = [s for s in r.samples if 1.6 < s["t"] < 2.9]
        assert done_while_down[-1]["stats"].requests["Preprocess"] > done_while_down[0]["stats"].requests["Preprocess"]
        after = loadgen.Load(server, models=[procs.QWEN2], clients=2, duration_s=1.0, stubs=stubs,
                             images=loadgen.corpus(2), flows=(("forward", 1.0),)).run()
        assert after.ok > 0 and not after.backend_errors and not after.service_errors
    finally:
        server.stop()
        for s in stubs.values():
            s.stop()


@pytest.fixture(scope="module")
def fetching_server(tmp_path_factory):
    s = procs.Server(
        tmp_path_factory.mktemp("fetchfaults"),
        "--fetch-timeout", "1.5",
        "--allow-private-hosts",
        "--allowed-media-domains", "127.0.0.1",
        "--log-level", "WARNING",
        models=[procs.QWEN2],
    )
    yield s
    s.stop()


def test_bad_fetch_servers_hold_no_worker(fetching_server):
    """Hanging, resetting and dribbling origins end in a clean status within the fetch
    timeout; while they are stuck the workers stay free for inline requests."""
    server = fetching_server
    bad = {mode: badhttp.BadHttp(mode) for mode in ("hang", "reset", "dribble")}
    inline = pb.PreprocessRequest(model=procs.QWEN2, images=[pb.MediaItem(data=imagegen.jpeg(240, 320, seed=5))], backend=pb.BACKEND_SGLANG)
    try:
        async def main():
            async with grpc.aio.insecure_channel(server.target, options=procs.CHANNEL_OPTIONS) as ch:
                stub = pb_grpc.MultimodalPreprocessorStub(ch)
                baseline = []
                for _ in range(5):
                    t = time.perf_counter()
                    await stub.Preprocess(inline, timeout=10)
                    baseline.append(time.perf_counter() - t)

                async def fetch(mode):
                    req = pb.PreprocessRequest(model=procs.QWEN2, images=[pb.MediaItem(url=bad[mode].url)])
                    t = time.perf_counter()
                    try:
                        await stub.Preprocess(req, timeout=30)
                        return mode, "OK", "", time.perf_counter() - t
                    except grpc.aio.AioRpcError as e:
                        return mode, e.code().name, e.details(), time.perf_counter() - t

                stuck = [asyncio.ensure_future(fetch(m)) for m in bad for _ in range(8)]
                await asyncio.sleep(0.3)
                during, busy = [], []
                for _ in range(8):
                    t = time.perf_counter()
                    await stub.Preprocess(inline, timeout=10)
                    during.append(time.perf_counter() - t)
                    st = await stub.GetStats(pb.GetStatsRequest())
                    busy.append((st.work.busy, st.fetch.in_flight))
                return baseline, during, busy, await asyncio.gather(*stuck)

        baseline, during, busy, outcomes = asyncio.run(main())
        # The stuck fetches never occupied a worker: inline requests ran at full speed.
        assert max(b for b, _ in busy) <= 1
        assert max(f for _, f in busy) > 0  # ...while fetches were indeed stuck
        assert sorted(during)[len(during) // 2] < 4 * sorted(baseline)[2] + 0.05, (baseline, during)
        expected = {"hang": {"DEADLINE_EXCEEDED"}, "dribble": {"DEADLINE_EXCEEDED"}, "reset": {"UNAVAILABLE"}}
        for mode, code, details, seconds in outcomes:
            assert code in expected[mode], (mode, code, details)
            assert details.startswith("image 0: http://127.0.0.1:") and seconds < 5.0, (mode, details, seconds)
        st = server.stats()
        assert st.fetch.in_flight == 0 and st.in_flight == 0 and st.work.busy == 0
        assert all(procs.wait_until(lambda b=b: b.open_connections == 0, 3) for b in bad.values())
        assert server.health() == "SERVING"
    finally:
        for b in bad.values():
            b.close()


def _heavy(n: int, seed: int, h: int = 1200, w: int = 1600) -> pb.PreprocessRequest:
    return pb.PreprocessRequest(model=procs.QWEN2, images=[pb.MediaItem(data=imagegen.jpeg(h, w, seed=seed))] * n)


def test_sigterm_drains_in_flight_and_a_restart_serves_at_once(tmp_path):
    server = procs.Server(tmp_path, "--grace", "30", "--cache-bytes", "0", models=[procs.QWEN2], name="drain")
    port = server.port
    try:
        async def main():
            async with grpc.aio.insecure_channel(server.target, options=procs.CHANNEL_OPTIONS) as ch:
                stub = pb_grpc.MultimodalPreprocessorStub(ch)
                calls = [asyncio.ensure_future(stub.Preprocess(_heavy(2, i), timeout=60)) for i in range(12)]
                # every call has reached the server (some may be done: ~0.5 s of work in all)
                assert await asyncio.to_thread(
                    procs.wait_until, lambda: server.stats().requests.get("Preprocess", 0) == 12, 10)
                in_flight = server.stats().in_flight
                t = time.monotonic()
                server.signal(signal.SIGTERM)
                await asyncio.sleep(0.2)
                try:
                    await stub.ListModels(pb.ListModelsRequest(), timeout=5)
                    refused = "OK"
                except grpc.aio.AioRpcError as e:
                    refused = e.code().name
                done = await asyncio.gather(*calls, return_exceptions=True)
                return t, in_flight, refused, done

        signalled, in_flight, refused, done = asyncio.run(main())
        assert in_flight > 0  # there was something to drain
        assert refused == "UNAVAILABLE"
        assert all(isinstance(r, pb.PreprocessResponse) and len(r.images) == 2 for r in done), done
        assert server.wait(30) == 0
        assert time.monotonic() - signalled < 30
        # A new server on the same port serves at once (no stale state, the port is free).
        t = time.monotonic()
        again = procs.Server(tmp_path, models=[procs.QWEN2], port=port, name="restarted")
        try:
            with grpc.insecure_channel(again.target) as ch:
                resp = pb_grpc.MultimodalPreprocessorStub(ch).Preprocess(_heavy(1, 0), timeout=30)
            assert len(resp.images) == 1
            assert time.monotonic() - t < 30
        finally:
            assert again.stop() == 0
    finally:
        server.stop()


def test_sigterm_grace_bounds_the_exit(tmp_path):
    """Calls still running when the grace period ends are cut off with a status, the
    workers stop at their next image, and the process exits 0 soon after."""
    server = procs.Server(tmp_path, "--grace", "1", "--cache-bytes", "0", models=[procs.QWEN2], name="grace")
    try:
        with grpc.insecure_channel(server.target, options=procs.CHANNEL_OPTIONS) as ch:
            stub = pb_grpc.MultimodalPreprocessorStub(ch)
            calls = [stub.Preprocess.future(_heavy(24, i), timeout=120) for i in range(4)]
            assert procs.wait_until(lambda: server.stats().work.busy > 0, 10)
            t = time.monotonic()
            server.signal(signal.SIGTERM)
            assert server.wait(20) == 0
            exited = time.monotonic() - t
            codes = {c.code() for c in calls if c.exception(10) is not None}
        assert exited < 1.0 + 3.0, exited  # the grace period, then at most the images in progress
        assert codes and codes <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}, codes
        assert "Traceback" not in server.log_text()
    finally:
        server.stop()
