"""Address checks: the classifier, pinning to the checked address (TLS included), refusals
on every redirect hop, the domain allowlist. Public addresses appear only as literals
that are classified or handed to a recording socket layer; nothing but 127.0.0.1 is
ever contacted."""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from urllib.parse import quote

import pytest

from fetch_helpers import DialRecorder, fetch, fetch_error, make_fetcher, static_resolver
from media_servers import OriginHandler, make_cert, payload, serve, tls_server_context
from sglang_mm_grpc.core.errors import Code, PreprocessError
from sglang_mm_grpc.media import FetchPolicy
from sglang_mm_grpc.media.ssrf import refusal_reason

PUBLIC = "93.184.215.14"  # a public address; only ever classified or recorded, never dialled


@pytest.mark.parametrize(
    "address, reason",
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("100.127.255.254", "shared (CGNAT)"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "private"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("::ffff:127.0.0.1", "loopback (IPv4-mapped)"),
        ("::ffff:169.254.169.254", "link-local (IPv4-mapped)"),
        ("::ffff:10.0.0.1", "private (IPv4-mapped)"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("ff02::1", "multicast"),
        ("2002:7f00:1::", "loopback (6to4)"),
        ("2002:a9fe:a9fe::1", "link-local (6to4)"),
        ("64:ff9b::7f00:1", "loopback (NAT64)"),
        ("64:ff9b::a9fe:a9fe", "link-local (NAT64)"),
        ("64:ff9b:1::1", "private (local-use NAT64)"),
    ],
)
def test_classifier_refuses(address, reason):
    got = refusal_reason(ipaddress.ip_address(address))
    if reason.startswith(("private", "reserved")):
        # Which of the two Python's ipaddress tables name first varies by version.
        assert got is not None and got.split(" ")[0] in ("private", "reserved", "non-global"), got
        assert got.endswith(reason[len(reason.split(" ")[0]):])
    else:
        assert got == reason


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", PUBLIC, "2606:4700:4700::1111", "64:ff9b::808:808", "::ffff:8.8.8.8"])
def test_classifier_allows_public(address):
    assert refusal_reason(ipaddress.ip_address(address)) is None


# --- literal and named hosts, no private opt-out ----------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/bytes/10",
        "http://[::1]:{port}/bytes/10",
        "http://[::ffff:127.0.0.1]:{port}/bytes/10",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:{port}/bytes/10",
        "http://100.64.0.1/x",
        "http://[64:ff9b::7f00:1]:{port}/bytes/10",
    ],
)
def test_literal_private_hosts_refused_before_connecting(origin, url):
    recorder = DialRecorder(origin.port)
    err = fetch_error([url.format(port=origin.port)], FetchPolicy(), network_backend=recorder)
    assert err.code is Code.PERMISSION_DENIED
    assert "private hosts are not allowed" in err.message
    assert recorder.dialled == [] and origin.log.paths() == []


def test_name_resolving_to_loopback_is_refused(origin):
    err = fetch_error([origin.url("/bytes/10")], FetchPolicy())  # localhost, real resolver
    assert err.code is Code.PERMISSION_DENIED
    assert "localhost resolves to" in err.message and "loopback" in err.message
    assert origin.log.paths() == []


@pytest.mark.parametrize("host", ["127.1", "2130706433", "0x7f.0.0.1"])
def test_other_spellings_of_loopback_are_refused(origin, host):
    """Not IP literals to the URL parser, so they reach the resolver, whose answer is checked."""
    err = fetch_error([f"http://{host}:{origin.port}/bytes/10"], FetchPolicy())
    assert err.code is Code.PERMISSION_DENIED and "127.0.0.1, a loopback address" in err.message
    assert origin.log.paths() == []


def test_name_with_any_private_answer_is_refused(origin):
    recorder = DialRecorder(origin.port)
    resolver = static_resolver({"mixed.example": [PUBLIC, "10.0.0.7"]})
    err = fetch_error(["http://mixed.example/a.png"], FetchPolicy(), resolver=resolver, network_backend=recorder)
    assert err.code is Code.PERMISSION_DENIED and "10.0.0.7" in err.message
    assert recorder.dialled == []


def test_unresolvable_name_is_unavailable():
    err = fetch_error(["http://nowhere.example/a.png"], FetchPolicy(), resolver=static_resolver({}))
    assert err.code is Code.UNAVAILABLE and "cannot resolve nowhere.example" in err.message


# --- pinning: the checked address is the one dialled ------------------------------------------------


def test_connection_goes_to_the_checked_address(origin):
    recorder = DialRecorder(origin.port)
    calls: list[str] = []
    resolver = static_resolver({"images.example": [PUBLIC]}, calls)
    out = fetch([f"http://images.example:{origin.port}/echo-host"], FetchPolicy(), resolver=resolver, network_backend=recorder)
    assert out == [f"images.example:{origin.port}".encode()]  # Host header keeps the name
    assert recorder.dialled == [(PUBLIC, origin.port)]  # the socket went to the checked address
    assert calls == ["images.example"]  # resolved once


def test_rebinding_answer_is_never_used(origin):
    """A second DNS answer (rebinding to loopback) is never asked for or dialled."""
    recorder = DialRecorder(origin.port)
    answers = iter([[PUBLIC], ["127.0.0.1"], ["127.0.0.1"]])
    calls: list[str] = []

    async def rebinding(host, port):
        calls.append(host)
        return next(answers)

    out = fetch([f"http://rebind.example:{origin.port}/bytes/10"], FetchPolicy(), resolver=rebinding, network_backend=recorder)
    assert out == [payload(10)]
    assert calls == ["rebind.example"] and recorder.dialled == [(PUBLIC, origin.port)]


def test_next_address_is_tried_when_the_first_refuses(origin):
    """Every answer is checked; dialling falls through the checked list in order."""

    class FirstRefuses(DialRecorder):
        async def connect_tcp(self, host, port, **kw):
            import httpcore

            if not self.dialled:
                self.dialled.append((host, port))
                raise httpcore.ConnectError("refused")
            return await super().connect_tcp(host, port, **kw)

    recorder = FirstRefuses(origin.port)
    resolver = static_resolver({"two.example": [PUBLIC, "8.8.4.4"]})
    assert fetch([f"http://two.example:{origin.port}/bytes/3"], FetchPolicy(), resolver=resolver, network_backend=recorder) == [payload(3)]
    assert recorder.dialled == [(PUBLIC, origin.port), ("8.8.4.4", origin.port)]


@pytest.fixture(scope="module")
def tls_origin(tmp_path_factory):
    cert, key = make_cert(tmp_path_factory.mktemp("tls"), "pinned.test")
    sni: list = []
    with serve(OriginHandler, tls=tls_server_context(cert, key, sni)) as (port, log):
        yield port, log, sni, cert


def test_tls_verifies_the_real_name_while_dialling_the_pinned_address(tls_origin):
    port, log, sni, cert = tls_origin
    sni.clear()
    client_ctx = ssl.create_default_context(cafile=str(cert))
    calls: list[str] = []
    resolver = static_resolver({"pinned.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}, calls)
    policy = FetchPolicy(allow_private_hosts=True)
    out = fetch([f"https://pinned.test:{port}/echo-host"], policy, resolver=resolver, ssl_context=client_ctx)
    assert out == [f"pinned.test:{port}".encode()]
    assert sni == ["pinned.test"] and calls == ["pinned.test"]

    # Same address, another name: the certificate does not match, so TLS fails.
    err = fetch_error([f"https://other.test:{port}/echo-host"], policy, resolver=resolver, ssl_context=client_ctx)
    assert err.code is Code.UNAVAILABLE and "CERTIFICATE_VERIFY_FAILED" in err.message
    assert sni[-1] == "other.test"


# --- every redirect hop is checked ------------------------------------------------------------------------


def _public_front(origin):
    """A fetcher for which ``cdn.example`` is a public address that leads to the origin."""
    recorder = DialRecorder(origin.port)
    resolver = static_resolver({"cdn.example": [PUBLIC], "localhost": ["127.0.0.1"]})
    return recorder, dict(resolver=resolver, network_backend=recorder)


@pytest.mark.parametrize(
    "target, shown",
    [
        ("http://127.0.0.1:{port}/bytes/10", "127.0.0.1 is a loopback address"),
        ("http://localhost:{port}/bytes/10", "localhost resolves to 127.0.0.1, a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://[::ffff:10.0.0.1]/x", "private (IPv4-mapped)"),
    ],
)
def test_redirect_to_private_address_is_refused(origin, target, shown):
    recorder, kw = _public_front(origin)
    first = f"http://cdn.example:{origin.port}/redirect?to=" + quote(target.format(port=origin.port))
    err = fetch_error([first], FetchPolicy(), **kw)
    assert err.code is Code.PERMISSION_DENIED
    assert "redirect 1 to" in err.message and shown in err.message
    assert recorder.dialled == [(PUBLIC, origin.port)]  # only the first, public hop was dialled
    assert len(origin.log.paths()) == 1


def test_redirect_to_private_allowed_when_opted_out(origin):
    target = origin.url("/bytes/10", host="127.0.0.1")
    assert fetch([origin.url("/redirect?to=" + quote(target))], FetchPolicy(allow_private_hosts=True)) == [payload(10)]


def test_domain_allowlist(origin):
    policy = FetchPolicy(allow_private_hosts=True, allowed_media_domains=("LocalHost",))
    assert fetch([origin.url("/bytes/4", host="LOCALHOST")], policy) == [payload(4)]
    err = fetch_error([origin.url("/bytes/4", host="127.0.0.1")], policy)
    assert err.code is Code.PERMISSION_DENIED and "not in allowed_media_domains" in err.message
    assert origin.log.paths() == ["/bytes/4"]


def test_domain_allowlist_on_a_redirect_hop(origin):
    policy = FetchPolicy(allow_private_hosts=True, allowed_media_domains=("localhost",))
    hop = origin.url("/bytes/4", host="127.0.0.1")
    err = fetch_error([origin.url("/redirect?to=" + quote(hop))], policy)
    assert err.code is Code.PERMISSION_DENIED
    assert "redirect 1 to" in err.message and "host 127.0.0.1 is not in allowed_media_domains" in err.message
    assert len(origin.log.paths()) == 1


def test_allowlist_is_exact_not_suffix(origin):
    policy = FetchPolicy(allowed_media_domains=("example.com",))
    for host in ("cdn.example.com", "example.com.evil.net", "notexample.com"):
        err = fetch_error([f"http://{host}/a.png"], policy, resolver=static_resolver({}))
        assert err.code is Code.PERMISSION_DENIED, host


def test_refusals_are_counted_by_reason(origin):
    async def go():
        async with make_fetcher(FetchPolicy(allowed_media_domains=("localhost",))) as fetcher:
            for url in (origin.url("/bytes/1"), "http://other.example/x", "http://10.0.0.1/x"):
                with pytest.raises(PreprocessError):
                    await fetcher.fetch_all([url])
            return fetcher.stats

    stats = asyncio.run(go())
    assert stats["refusals"] == {"private_address": 1, "domain_not_allowed": 2}
