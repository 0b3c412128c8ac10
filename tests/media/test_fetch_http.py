"""http(s) fetching against real local servers: timeouts, caps, lying lengths, statuses,
redirects, concurrency and cancellation."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from urllib.parse import quote

import anyio
import pytest

from fetch_helpers import DialRecorder, fetch, fetch_error, make_fetcher
from media_servers import closed_port, payload
from sglang_mm_grpc.core.errors import Code, PreprocessError
from sglang_mm_grpc.media import FetchPolicy
from sglang_mm_grpc.media.fetch import _cancelled_once
from sglang_mm_grpc.media.pools import ConnectionPool


def policy(**kw) -> FetchPolicy:
    kw.setdefault("allow_private_hosts", True)
    return FetchPolicy(**kw)


def test_fetch_bytes(origin):
    assert fetch([origin.url("/bytes/5000"), origin.url("/bytes/1", host="127.0.0.1")]) == [payload(5000), payload(1)]
    headers = dict(origin.log.requests)["/bytes/5000"]
    assert headers["host"] == f"localhost:{origin.port}"
    assert headers["accept-encoding"] == "identity"


def test_no_sources_is_no_work():
    assert fetch([]) == []


def test_empty_body_is_unavailable(origin):
    err = fetch_error([origin.url("/empty")])
    assert err.code is Code.UNAVAILABLE and "empty body" in err.message


def test_connections_are_pooled_across_requests(origin):
    dialled = []

    async def go():
        recorder = DialRecorder(origin.port)
        async with make_fetcher(policy(), network_backend=recorder) as fetcher:
            for _ in range(3):
                await fetcher.fetch_all([origin.url("/bytes/10", host="127.0.0.1")])
        dialled.extend(recorder.dialled)

    asyncio.run(go())
    assert len(dialled) == 1


# --- timeouts and deadlines -----------------------------------------------------------------


def test_slow_drip_body_times_out(origin):
    t0 = time.monotonic()
    err = fetch_error([origin.url("/drip")], policy(fetch_timeout_s=0.5))
    elapsed = time.monotonic() - t0
    assert err.code is Code.DEADLINE_EXCEEDED
    assert "fetch_timeout_s (0.5 s)" in err.message
    assert 0.4 < elapsed < 2.0


def test_headers_never_sent_times_out(origin):
    err = fetch_error([origin.url("/hang")], policy(fetch_timeout_s=0.3))
    assert err.code is Code.DEADLINE_EXCEEDED


def test_request_deadline_caps_the_fetch_timeout(origin):
    t0 = time.monotonic()
    err = fetch_error([origin.url("/drip")], policy(fetch_timeout_s=30), deadline=time.monotonic() + 0.4)
    assert err.code is Code.DEADLINE_EXCEEDED
    assert "request deadline" in err.message
    assert time.monotonic() - t0 < 2.0


def test_passed_deadline_fetches_nothing(origin):
    err = fetch_error([origin.url("/bytes/10")], policy(), deadline=time.monotonic() - 1)
    assert err.code is Code.DEADLINE_EXCEEDED
    assert origin.log.paths() == []


def test_request_timeout_env_is_the_default(origin, monkeypatch):
    monkeypatch.setenv("REQUEST_TIMEOUT", "0.3")
    err = fetch_error([origin.url("/hang")], FetchPolicy.from_env(allow_private_hosts=True))
    assert err.code is Code.DEADLINE_EXCEEDED and "0.3 s" in err.message


# --- size caps and lying Content-Length --------------------------------------------------------


@pytest.mark.parametrize("route", ["/endless", "/endless-chunked"])
def test_endless_body_hits_stream_cap(origin, route):
    err = fetch_error([origin.url(route)], policy(max_remote_bytes=1 << 20))
    assert err.code is Code.RESOURCE_EXHAUSTED
    assert "max_remote_bytes (1 MiB)" in err.message


def test_content_length_over_cap_is_refused_before_reading(origin):
    async def go():
        async with make_fetcher(policy()) as fetcher:
            with pytest.raises(PreprocessError) as info:
                await fetcher.fetch_all([origin.url("/huge-cl")])
            return info.value, fetcher.stats

    t0 = time.monotonic()
    err, stats = asyncio.run(go())
    assert err.code is Code.RESOURCE_EXHAUSTED
    assert "Content-Length 10737418240 exceeds max_remote_bytes (64 MiB)" in err.message
    assert stats["bytes_fetched"] == 0
    assert stats["refusals"] == {"max_remote_bytes": 1}
    assert time.monotonic() - t0 < 1.0  # did not wait for the trickle


def test_content_length_over_claiming(origin):
    err = fetch_error([origin.url("/overclaim")])
    assert err.code is Code.UNAVAILABLE
    assert "reading the response" in err.message


def test_body_larger_than_content_length_is_cut_at_the_length(origin):
    assert fetch([origin.url("/underclaim")]) == [payload(10)]


# --- statuses and connection failures ------------------------------------------------------------


@pytest.mark.parametrize("status, text", [(404, "HTTP 404 Not Found"), (500, "HTTP 500 Internal Server Error"), (403, "HTTP 403")])
def test_http_errors_are_unavailable(origin, status, text):
    err = fetch_error([origin.url(f"/status/{status}")])
    assert err.code is Code.UNAVAILABLE
    assert text in err.message


def test_connection_refused_is_unavailable():
    err = fetch_error([f"http://127.0.0.1:{closed_port()}/a.png"])
    assert err.code is Code.UNAVAILABLE
    assert "connection failed" in err.message


def test_error_message_names_item_and_redacts_source(origin):
    url = f"http://alice:s3cret@localhost:{origin.port}/status/404?token=abc"
    err = fetch_error([b"ok", url])
    assert err.item == 1
    assert err.message.startswith(f"image 1: http://***@localhost:{origin.port}/status/404?…: HTTP 404")
    assert "s3cret" not in err.message and "token" not in err.message


# --- redirects --------------------------------------------------------------------------------------


def test_redirects_are_followed(origin):
    assert fetch([origin.url("/chain/3")]) == [payload(10)]
    assert origin.log.paths() == ["/chain/3", "/chain/2", "/chain/1", "/chain/0"]


def test_exactly_max_redirects_is_allowed(origin):
    assert fetch([origin.url("/chain/10")]) == [payload(10)]


def test_too_many_redirects(origin):
    err = fetch_error([origin.url("/chain/11")])
    assert err.code is Code.RESOURCE_EXHAUSTED and "max_redirects (10)" in err.message
    err = fetch_error([origin.url("/chain/1")], policy(max_redirects=0))
    assert "max_redirects (0)" in err.message


def test_redirect_loop(origin):
    err = fetch_error([origin.url("/loop")])
    assert err.code is Code.UNAVAILABLE and "redirect loop" in err.message
    assert len(origin.log.paths()) == 1


def test_redirect_to_another_scheme_is_refused(origin):
    err = fetch_error([origin.url("/redirect?to=" + quote("file:///etc/passwd"))])
    assert err.code is Code.PERMISSION_DENIED and "'file'" in err.message


def test_relative_redirect_and_307(origin):
    assert fetch([origin.url("/redirect?code=307&to=" + quote("/bytes/7"))]) == [payload(7)]


# --- concurrency, cancellation, stats ------------------------------------------------------------------


def test_fetches_of_one_request_run_concurrently(origin):
    t0 = time.monotonic()
    out = fetch([origin.url("/slow/0.5")] * 8, policy(fetch_timeout_s=5))
    elapsed = time.monotonic() - t0
    assert out == [payload(10)] * 8
    assert elapsed < 1.5, elapsed  # 8 in series would take 4 s
    assert origin.log.max_active >= 4


def test_global_concurrency_cap(origin):
    t0 = time.monotonic()
    fetch([origin.url("/slow/0.3")] * 4, policy(max_concurrent_fetches=2, fetch_timeout_s=5))
    assert time.monotonic() - t0 >= 0.55
    assert origin.log.max_active <= 2


def test_concurrency_cap_is_shared_by_requests(origin):
    async def go():
        async with make_fetcher(policy(max_concurrent_fetches=2, fetch_timeout_s=5)) as fetcher:
            await asyncio.gather(*(fetcher.fetch_all([origin.url("/slow/0.2")] * 2) for _ in range(3)))

    t0 = time.monotonic()
    asyncio.run(go())
    assert time.monotonic() - t0 >= 0.55
    assert origin.log.max_active <= 2


def test_first_failure_cancels_the_rest(origin):
    async def go():
        async with make_fetcher(policy(fetch_timeout_s=10)) as fetcher:
            with pytest.raises(PreprocessError) as info:
                await fetcher.fetch_all([origin.url("/hold"), origin.url("/status/500?after=hold")])
            return info.value, fetcher.stats

    t0 = time.monotonic()
    err, stats = asyncio.run(go())
    assert err.item == 1 and "HTTP 500" in err.message
    assert time.monotonic() - t0 < 3
    assert origin.log.closed_event.wait(3), "the /hold connection was not closed"
    assert stats["in_flight"] == 0


def test_cancelling_the_caller_closes_connections(origin):
    async def go():
        fetcher = make_fetcher(policy(fetch_timeout_s=10))
        task = asyncio.ensure_future(fetcher.fetch_all([origin.url("/hold"), origin.url("/hold")]))
        for _ in range(200):
            if len(origin.log.paths()) == 2:
                break
            await asyncio.sleep(0.01)
        assert fetcher.stats["in_flight"] == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stats = fetcher.stats
        await fetcher.aclose()
        return stats

    stats = asyncio.run(go())
    assert stats["in_flight"] == 0
    deadline = time.monotonic() + 3
    while len(origin.log.closed) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert origin.log.closed == ["/hold", "/hold"]


def test_a_fetch_is_cancelled_only_after_its_shielded_cleanup():
    """The caller's cancellation reaches a fetch through an anyio cancel scope, so it waits
    for a cleanup httpcore shields (closing a response: take its lock, mark the
    connection idle, drop the request from the pool). Before, a plain Task.cancel landed
    inside that cleanup and the pool counted the request and its connection for good."""
    events: list[str] = []

    async def fetch_that_is_closing():
        with anyio.CancelScope(shield=True):  # as httpcore closes a response
            events.append("closing")
            await asyncio.sleep(0.05)
            events.append("closed")
        await asyncio.sleep(10)  # what is left of the fetch: cancelled here
        events.append("not cancelled")

    async def go():
        task = asyncio.ensure_future(_cancelled_once(fetch_that_is_closing()))
        while not events:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(go(), 5))
    assert events == ["closing", "closed"]


def test_requests_cancelled_before_they_dial_leave_no_connection(origin):
    """Two requests on a one-connection pool, both cancelled as the pool hands the first
    its new connection: the connection nobody dialed is dropped, and the next request
    gets a connection (httpcore's own pool keeps it and the next request times out)."""

    async def go():
        async with ConnectionPool(max_connections=1) as pool:
            url = origin.url("/bytes/10", host="127.0.0.1")
            tasks = [asyncio.ensure_future(pool.request("GET", url)) for _ in range(2)]
            await asyncio.sleep(0)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            left = list(pool.connections)
            response = await pool.request("GET", url, extensions={"timeout": {"pool": 2.0}})
            return left, response.status, response.content

    left, status, body = asyncio.run(go())
    assert left == [] and status == 200 and body == payload(10)


def test_stats_count_fetches_bytes_and_refusals(origin):
    async def go():
        async with make_fetcher(FetchPolicy(request_byte_budget=4)) as fetcher:
            with pytest.raises(PreprocessError):
                await fetcher.fetch_all([origin.url("/bytes/10", host="127.0.0.1")])
            with pytest.raises(PreprocessError):
                await fetcher.fetch_all([b"12345"])
            return fetcher.stats

    stats = asyncio.run(go())
    assert stats["refusals"] == {"private_address": 1, "request_byte_budget": 1}
    assert stats["fetches_started"] == 0 and stats["in_flight"] == 0

    async def go2():
        async with make_fetcher(policy()) as fetcher:
            await fetcher.fetch_all([origin.url("/bytes/100"), origin.url("/bytes/50"), b"inline"])
            with pytest.raises(PreprocessError):
                await fetcher.fetch_all([origin.url("/status/404")])
            return fetcher.stats

    stats = asyncio.run(go2())
    assert stats["fetches_started"] == 3 and stats["fetches_failed"] == 1
    assert stats["bytes_fetched"] == 150


def test_fetching_uses_no_threads_for_ip_literals(origin):
    """Fetches are pure asyncio: with an IP literal (no DNS) the loop's executor is unused."""

    class NoExecutor(concurrent.futures.ThreadPoolExecutor):
        def submit(self, *a, **k):
            raise AssertionError("a fetch used an executor thread")

    async def go():
        asyncio.get_running_loop().set_default_executor(NoExecutor())
        async with make_fetcher(policy()) as fetcher:
            return await fetcher.fetch_all([origin.url("/bytes/10", host="127.0.0.1")] * 3)

    before = {t.name for t in threading.enumerate()}
    assert asyncio.run(go()) == [payload(10)] * 3
    new = {t.name for t in threading.enumerate()} - before
    assert not any(name.startswith("asyncio") for name in new)
