"""Cancellation and deadlines free what the call held: the worker stops at its next image
(image steps skipped, pool idle long before the whole request would have finished),
the fetch is cancelled (socket closed, fetch in-flight back to 0), the admission slot
returns, and no handle is left in the store.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import random
import time

import grpc
import pytest

import badhttp
import imagegen
import procs
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

N_HEAVY = 24
TTL_S = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = procs.Server(
        tmp_path_factory.mktemp("cancel"),
        "--cache-bytes", "0",
        "--fetch-timeout", "30",
        "--allow-private-hosts",
        "--allowed-media-domains", "127.0.0.1",
        "--handle-ttl", str(TTL_S),
        models=[procs.QWEN2, procs.PIXTRAL],
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.target, options=procs.CHANNEL_OPTIONS) as ch:
        yield pb_grpc.MultimodalPreprocessorStub(ch)


@pytest.fixture(scope="module")
def heavy(stub):
    """A request of 24 large photos (each one decode and one process step; Pixtral's
    output stays small) and how long it takes uncancelled."""
    image = imagegen.jpeg(2000, 2000, seed=3)
    req = pb.PreprocessRequest(model=procs.PIXTRAL, images=[pb.MediaItem(data=image)] * N_HEAVY)
    full = min(uncancelled(stub, req) for _ in range(3))  # the fastest warm run: a cold first run overstates it
    # What the same bytes cost before any work (upload, parse; refused for its model), so
    # a deadline can land inside the work however fast the work has become.
    wrong_model = pb.PreprocessRequest(model="no-such-model", images=req.images)
    ahead = []
    for _ in range(3):
        t = time.monotonic()
        with pytest.raises(grpc.RpcError):
            stub.Preprocess(wrong_model, timeout=120)
        ahead.append(time.monotonic() - t)
    work = full - min(ahead)
    assert work > 0.3, f"the heavy request must take a while to cancel inside it ({work:.2f} s of work)"
    return req, full, min(ahead)


def uncancelled(stub, req) -> float:
    """Seconds ``req`` takes when nothing stops it (its result released)."""
    t = time.monotonic()
    resp = stub.Preprocess(req, timeout=120)
    took = time.monotonic() - t
    stub.Release(pb.ReleaseRequest(handle=resp.handle))
    return took


def idle(server, timeout: float) -> tuple[bool, float, pb.GetStatsResponse]:
    """Wait for no worker task and no request in flight; (reached, seconds, stats)."""
    t = time.monotonic()
    st = procs.wait_until(lambda: (s := server.stats()).work.busy == 0 and s.in_flight == 0 and s, timeout, 0.01)
    return bool(st), time.monotonic() - t, st or server.stats()


def started(server) -> bool:
    return procs.wait_until(lambda: server.stats().work.busy > 0, 10, 0.005)


@pytest.mark.parametrize("how", ["client cancel", "deadline"])
def test_cancel_frees_cpu(server, stub, heavy, how):
    req, full, ahead = heavy
    # as fast as the machine is now: the fixture may have timed it at a busier moment, and
    # a deadline meant to land inside the work would then come after it
    full = min(full, uncancelled(stub, req))
    before = server.stats()
    if how == "client cancel":
        call = stub.Preprocess.future(req, timeout=120)
        assert started(server)
        time.sleep(full * 0.15)
        call.cancel()
        t_cancel = time.monotonic()
        expected = grpc.StatusCode.CANCELLED
    else:
        # well inside the work: what comes before the first image step (upload, admission,
        # the batch tensor) is more than ``ahead`` and varies, so not early in it
        timeout = ahead + (full - ahead) * 0.6
        call = stub.Preprocess.future(req, timeout=timeout)
        t_cancel = time.monotonic() + timeout
        expected = grpc.StatusCode.DEADLINE_EXCEEDED
    assert call.cancelled() or call.exception(60) is not None
    assert call.code() == expected
    reached, _, after = idle(server, 30)
    freed_in = time.monotonic() - t_cancel
    assert reached
    # The rest of the request was never run: well before it would have finished...
    assert freed_in < full * 0.6, (freed_in, full)
    # ...because the image steps after the cancel were skipped (24 decode + 24 process).
    run = after.work.image_steps - before.work.image_steps
    skipped = after.work.image_steps_skipped - before.work.image_steps_skipped
    assert skipped > 0 and run < 2 * N_HEAVY, (run, skipped)
    assert after.store.items == before.store.items
    codes = {(s.method, s.code): s.count for s in after.statuses}
    assert codes.get(("Preprocess", expected.name), 0) > 0


@pytest.mark.parametrize("how", ["client cancel", "deadline"])
def test_cancel_frees_fetch(server, stub, how):
    hang = badhttp.BadHttp("hang")
    try:
        req = pb.PreprocessRequest(model=procs.QWEN2, images=[pb.MediaItem(url=hang.url)] * 3)
        before = server.stats()
        call = stub.Preprocess.future(req, timeout=60 if how == "client cancel" else 0.6)
        assert procs.wait_until(lambda: server.stats().fetch.in_flight == 3, 10)
        assert procs.wait_until(lambda: hang.open_connections == 3, 5)
        if how == "client cancel":
            call.cancel()
        assert call.cancelled() or call.exception(10) is not None
        assert call.code() == (grpc.StatusCode.CANCELLED if how == "client cancel" else grpc.StatusCode.DEADLINE_EXCEEDED)
        # The fetches were cancelled, not left to their 30 s timeout: sockets closed.
        assert procs.wait_until(lambda: server.stats().fetch.in_flight == 0, 2)
        # (well inside the 30 s fetch timeout: closed because cancelled, not timed out)
        assert procs.wait_until(lambda: hang.open_connections == 0, 10), hang.open_connections
        after = server.stats()
        assert after.in_flight == 0 and after.work.busy == 0
        assert after.work.image_steps == before.work.image_steps  # nothing reached a worker
    finally:
        hang.close()


def test_no_handle_left_behind(server, stub):
    """Two-phase calls whose deadlines land in every stage, from fetch to the response:
    a call the server saw cancelled keeps nothing, so after the clients release what they
    received the store holds at most the calls the server completed in the instant the
    client gave up (logged OK server-side; grpc does not report a client that gives up
    after the handler returned), and those go when their TTL ends."""
    rng = random.Random(7)
    image = imagegen.jpeg(480, 640, seed=11)
    before = server.stats().store.items

    def one(i: int, timeout: float = 30):
        rid = f"nh-{i}"
        t = time.monotonic()
        try:
            return rid, stub.Preprocess(_two_phase(image, rid), timeout=timeout).handle, time.monotonic() - t
        except grpc.RpcError as e:
            return rid, e.code().name, time.monotonic() - t

    with cf.ThreadPoolExecutor(6) as ex:
        probes = list(ex.map(one, range(-12, 0)))  # the latency at this concurrency
        for _, h, _ in probes:
            stub.Release(pb.ReleaseRequest(handle=h))
        typical = sorted(dt for _, _, dt in probes)[len(probes) // 2]
        outcomes = list(ex.map(lambda i: one(i, rng.uniform(0.05, 2.0) * typical)[:2], range(90)))
    handles = [h for _, h in outcomes if "@" in h]  # <token>@<owner>; the rest are status names
    failed = {rid for rid, h in outcomes if "@" not in h}
    assert handles and failed, "deadlines must both pass and fail"
    assert {h for _, h in outcomes if "@" not in h} <= {"DEADLINE_EXCEEDED"}
    assert procs.wait_until(lambda: server.stats().in_flight == 0, 10)
    for h in handles:
        assert stub.Release(pb.ReleaseRequest(handle=h)).released
    leftover = server.stats().store.items - before
    server_ok = {r["request_id"] for r in _log_records(server) if r["status"] == "OK"}
    print(f"{len(handles)} handles, {len(failed)} deadlines passed, {leftover} completed as the client gave up")
    assert 0 <= leftover <= len(failed & server_ok), (leftover, len(failed & server_ok))
    assert procs.wait_until(lambda: server.stats().store.items == 0, TTL_S + 3), "left-over handles must expire"


def _two_phase(image: bytes, rid: str) -> pb.PreprocessRequest:
    return pb.PreprocessRequest(request_id=rid, model=procs.QWEN2, images=[pb.MediaItem(data=image)] * 2)


def _log_records(server) -> list[dict]:
    out = []
    for line in server.log_text().splitlines():
        start = line.find('{"event":"request"')
        if start != -1:
            out.append(json.loads(line[start:]))
    return out
