"""Hostile inputs through the real gRPC server: every case gets its exact status code and a
message naming the image, the (redacted) source and the cause; the server then still
answers health checks and serves a good request; and its memory stays bounded however
large the inputs claim to be.

The table, the servers and their flags are in ``hostile.py`` (shared with
``scripts/hostile_rss.py``, which prints the memory figures on their own). Only
127.0.0.1 is ever contacted: refused addresses are refused before any connection, and
the cases that could have leaked check the local proxy's and origin's logs.
Run with ``-s`` to see the RSS figures.
"""

from __future__ import annotations

import base64
import time

import grpc
import pytest

import hostile
from hostile import CASES, GOOD, PUBLIC, QWEN2, Case
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

MAX_GROWTH = 300 * hostile.MiB  # far below what the inputs claim (a 100k x 100k bomb alone: 30 GB)


@pytest.fixture(scope="module")
def h(tmp_path_factory):
    harness = hostile.Harness(tmp_path_factory.mktemp("hostile")).start()
    try:
        for name in ("strict", "open"):
            harness.good_request(name)  # one-time costs of the first request belong to the baseline
            harness.baseline = getattr(harness, "baseline", {})
            harness.baseline[name] = hostile.proc_status(harness.pid(name))
            harness.peak_reset = hostile.reset_peak(harness.pid(name))
        yield harness
    finally:
        harness.stop()


def test_the_table_is_big_and_unique():
    ids = [c.id for c in CASES]
    assert len(ids) >= 40 and len(set(ids)) == len(ids)
    assert {c.code for c in CASES} >= {
        "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "PERMISSION_DENIED", "DEADLINE_EXCEEDED", "UNAVAILABLE", "NOT_FOUND"
    }


@pytest.mark.parametrize("case", CASES, ids=[f"{c.server}-{c.id}" for c in CASES])
def test_hostile(h, case: Case):
    h.http_reset()
    code, details = h.run(case)
    hostile.check_case(case, code, details, h.env, h.http_log())
    assert h.health(case.server) == "SERVING"
    assert len(h.good_request(case.server).images) == 1


def test_every_source_kind_still_works(h):
    """After the table: each server serves every kind of source it allows, and the
    proxy / NO_PROXY split is the one configured."""
    env = h.env
    b64 = base64.b64encode(GOOD).decode()
    h.http_reset()
    sources = [
        GOOD,
        f"data:image/png;base64,{b64}",
        b64,
        env.o("/img/good.png"),  # NO_PROXY=127.0.0.1: direct
        env.o("/img/good.png", host="localhost"),  # through the proxy
        f"{env.root}/good.png",
        f"file://{env.root}/good.png",
    ]
    resp = h.stub("open").Preprocess(hostile.request_for(hostile.O("good", sources, "OK"), env), timeout=30)
    assert len(resp.images) == len(sources)
    log = h.http_log()
    assert [p for p in log["proxy"] if "localhost" in p] == [f"http://localhost:{env.origin}/img/good.png"]
    assert not any("127.0.0.1" in p for p in log["proxy"])

    h.http_reset()
    resp = h.stub("strict").Preprocess(
        hostile.request_for(hostile.S("good", [GOOD, f"http://{PUBLIC}/img/good.png", b64], "OK"), env), timeout=30
    )
    assert len(resp.images) == 3
    assert h.http_log()["proxy"] == [f"http://{PUBLIC}/img/good.png"]


def test_models_report_the_configured_image_limit(h):
    for name, limit in (("strict", 64), ("open", 8)):
        resp = h.stub(name).ListModels(pb.ListModelsRequest(), timeout=10)
        assert [m.max_images_per_request for m in resp.models] == [limit]


def test_cancelling_the_rpc_cancels_its_fetch(h):
    """The client goes away mid-fetch: the server closes the origin connection at once,
    not when its 2 s fetch timeout (or the origin's 10 s hold) would have."""
    h.http_reset()
    req = hostile.request_for(hostile.O("hold", lambda e: [e.o("/hold")], "OK"), h.env)
    started = time.monotonic()
    call = h.stub("open").Preprocess.future(req, timeout=30)
    while "/hold" not in h.http_log()["origin"]:
        assert time.monotonic() - started < 5, "the fetch never reached the origin"
        time.sleep(0.02)
    cancelled = time.monotonic()
    call.cancel()
    while "/hold" not in h.http_log()["closed"]:
        assert time.monotonic() - cancelled < 1.0, "the fetch outlived its cancelled RPC"
        time.sleep(0.02)
    assert time.monotonic() - started < 2.0  # before the fetch timeout could have closed it
    with pytest.raises(grpc.FutureCancelledError):
        call.result()
    end = time.monotonic() + 5
    while "preprocess: cancelled by the client" not in h.logs["open"].read_text():
        assert time.monotonic() < end, h.log_text("open")
        time.sleep(0.05)
    assert h.health("open") == "SERVING"


def test_fetches_run_concurrently_under_the_global_cap(h):
    """One request's four 0.6 s fetches with --max-concurrent-fetches 2: two at a time, so
    two waves (not four in a row, not four at once)."""
    h.http_reset()
    case = hostile.O("slow", lambda e: [e.o("/slow/0.6")] * 4, "INVALID_ARGUMENT", "not a decodable image")
    t0 = time.monotonic()
    code, details = h.run(case)
    elapsed = time.monotonic() - t0
    hostile.check_case(case, code, details, h.env)  # 10-byte bodies: fetched, then refused by the decoder
    assert h.http_log()["max_active"] == 2
    assert 1.15 < elapsed < 2.2, elapsed


def test_fetches_do_not_occupy_cpu_workers(h):
    """With both fetch slots busy for 1.5 s, requests that need only the CPU workers
    (--workers 2) are served at once."""
    h.http_reset()
    slow = hostile.request_for(hostile.O("slow", lambda e: [e.o("/slow/1.5")] * 2, "OK"), h.env)
    in_flight = h.stub("open").Preprocess.future(slow, timeout=30)
    while len(h.http_log()["origin"]) < 2:
        time.sleep(0.02)
    t0 = time.monotonic()
    quick = [
        h.stub("open").Preprocess.future(
            pb.PreprocessRequest(model=QWEN2, images=[pb.MediaItem(data=hostile.imagegen.png(30 + i, 50, seed=90 + i))]),
            timeout=30,
        )
        for i in range(4)
    ]
    assert all(len(f.result().images) == 1 for f in quick)
    assert time.monotonic() - t0 < 1.0
    assert not in_flight.done()
    with pytest.raises(grpc.RpcError) as e:
        in_flight.result()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # the 10-byte bodies are not images


def test_repeated_big_failures_do_not_accumulate(h):
    """A failed fetch frees what it read when it fails: four more 64 MiB endless bodies and
    gzip bombs after the table leave the strict server's peak where one of each put it
    (each used to stay referenced from a reference cycle until a full GC)."""
    by_id = {c.id: c for c in CASES}
    endless, bomb = by_id["proxied_endless_64mib"], by_id["proxied_gzip_bomb_128mib"]
    for case in (endless, bomb):
        hostile.check_case(case, *h.run(case), h.env)
    before = hostile.proc_status(h.pid("strict"))["VmHWM"]
    for _ in range(4):
        for case in (endless, bomb):
            hostile.check_case(case, *h.run(case), h.env)
    grown = hostile.proc_status(h.pid("strict"))["VmHWM"] - before
    print(f"\n[hostile rss] strict: 8 more 64 MiB failures raised the peak by {hostile.mb(grown)}")
    assert grown < 32 * hostile.MiB, hostile.mb(grown)


def test_peak_rss_stays_bounded(h):
    """Runs last: peak RSS (VmHWM, reset after startup where the kernel allows) over the
    RSS before the table. Bounded by the limits (64 MiB per fetch, ...), not by the
    sizes the inputs claim (10 GiB Content-Length, 100 GiB file, 4.6e18-pixel header)."""
    for name in ("strict", "open"):
        before = h.baseline[name]
        now = hostile.proc_status(h.pid(name))
        growth = now["VmHWM"] - before["VmRSS"]
        print(
            f"\n[hostile rss] {name}: {len(CASES)} cases; RSS before {hostile.mb(before['VmRSS'])}, "
            f"now {hostile.mb(now['VmRSS'])}; peak {hostile.mb(now['VmHWM'])} "
            f"(+{hostile.mb(growth)}; peak reset after startup: {h.peak_reset})"
        )
        assert growth < MAX_GROWTH, f"{name}: peak RSS grew by {hostile.mb(growth)}"
