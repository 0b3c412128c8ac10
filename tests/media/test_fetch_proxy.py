"""Proxy selection and NO_PROXY (the ``requests`` rules), unit-tested and through a real
local forward proxy."""

from __future__ import annotations

import ssl

import pytest

from fetch_helpers import fetch, fetch_error, static_resolver
from media_servers import OriginHandler, make_cert, payload, serve, tls_server_context
from sglang_mm_grpc.core.errors import Code
from sglang_mm_grpc.media import FetchPolicy
from sglang_mm_grpc.media.proxy import NoProxyRule, ProxyConfig

# --- rules --------------------------------------------------------------------------------


def bypass(no_proxy: str, host: str, port: int | None = None) -> bool:
    return ProxyConfig.from_env({"HTTP_PROXY": "http://p:1", "NO_PROXY": no_proxy}).bypass(host, port)


@pytest.mark.parametrize(
    "no_proxy, host, port, expected",
    [
        ("internal", "internal", None, True),
        ("internal", "images.internal", None, True),
        (".internal", "images.internal", None, True),
        (".internal", "internal", None, True),
        ("internal", "notinternal", None, False),
        ("Images.Internal", "images.internal", None, True),
        (" a.com , , b.com ", "x.b.com", None, True),
        ("*", "anything.example", None, True),
        ("10.0.0.0/8", "10.1.2.3", None, True),
        ("10.0.0.0/8", "11.1.2.3", None, False),
        ("127.0.0.0/8", "localhost", None, False),  # CIDR never matches names
        ("192.168.1.0/24", "192.168.1.77", None, True),
        ("2.3", "10.1.2.3", None, False),  # IP literals match only exactly
        ("10.1.2.3", "10.1.2.3", None, True),
        ("example.com:8080", "example.com", 8080, True),
        ("example.com:8080", "img.example.com", 8080, True),
        ("example.com:8080", "example.com", 9090, False),
        ("example.com:8080", "example.com", None, False),  # only an explicit port matches
        ("10.1.2.3:8080", "10.1.2.3", 8080, True),
        ("::1", "::1", None, True),
        ("[::1]:8080", "[::1]", 8080, True),
        ("bad/cidr", "bad", None, False),
        ("", "example.com", None, False),
    ],
)
def test_no_proxy_rules(no_proxy, host, port, expected):
    assert bypass(no_proxy, host, port) is expected


def test_proxy_selection_by_scheme():
    cfg = ProxyConfig.from_env({"HTTP_PROXY": "h:3128", "HTTPS_PROXY": "https://s:443", "ALL_PROXY": "http://a:1"})
    assert cfg.proxy_for("http", "x") == "http://h:3128"  # scheme-less proxies are http://
    assert cfg.proxy_for("https", "x") == "https://s:443"
    assert ProxyConfig.from_env({"ALL_PROXY": "http://a:1"}).proxy_for("https", "x") == "http://a:1"
    assert ProxyConfig.from_env({}).proxy_for("http", "x") is None


def test_lowercase_variables_win():
    env = {"http_proxy": "http://lower:1", "HTTP_PROXY": "http://upper:1"}
    assert ProxyConfig.from_env(env).http == "http://lower:1"
    assert ProxyConfig.from_env({"http_proxy": "", "HTTP_PROXY": "http://upper:1"}).http is None  # empty lowercase unsets
    both = ProxyConfig.from_env({"HTTP_PROXY": "http://p:1", "no_proxy": "a.com", "NO_PROXY": "b.com"})
    assert both.bypass("a.com") and not both.bypass("b.com")
    fallback = ProxyConfig.from_env({"HTTP_PROXY": "http://p:1", "no_proxy": "", "NO_PROXY": "b.com"})
    assert fallback.bypass("b.com")


def test_rule_parsing():
    assert NoProxyRule.parse("  ") is None
    assert NoProxyRule.parse("*").everything


# --- through a real proxy -------------------------------------------------------------------------


def env_with(proxy, **extra) -> dict:
    return {"HTTP_PROXY": f"http://127.0.0.1:{proxy.port}", **extra}


def test_http_proxy_is_used(origin, proxy):
    out = fetch([origin.url("/bytes/6")], environ=env_with(proxy))
    assert out == [payload(6)]
    assert proxy.log.paths() == [origin.url("/bytes/6")]  # absolute-form request to the proxy


def test_http_proxy_from_os_environ(origin, proxy, monkeypatch):
    for name in ("http_proxy", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    assert fetch([origin.url("/bytes/6")], environ=None) == [payload(6)]
    assert len(proxy.log.paths()) == 1


@pytest.mark.parametrize(
    "no_proxy, host, direct",
    [
        ("localhost", "localhost", True),
        (".localhost", "localhost", True),
        ("*", "localhost", True),
        ("otherhost", "localhost", False),
        ("127.0.0.0/8", "127.0.0.1", True),
        ("127.0.0.0/8", "localhost", False),
        ("10.0.0.0/8", "127.0.0.1", False),
        ("localhost:{port}", "localhost", True),
        ("localhost:1", "localhost", False),
        ("127.0.0.1:{port}", "127.0.0.1", True),
    ],
)
def test_no_proxy_through_a_real_proxy(origin, proxy, no_proxy, host, direct):
    env = env_with(proxy, NO_PROXY=no_proxy.format(port=origin.port))
    assert fetch([origin.url("/bytes/6", host=host)], environ=env) == [payload(6)]
    assert len(origin.log.paths()) == 1
    assert (proxy.log.paths() == []) is direct


def test_proxied_target_resolving_to_private_is_refused(origin, proxy):
    err = fetch_error([origin.url("/bytes/6")], FetchPolicy(), environ=env_with(proxy))
    assert err.code is Code.PERMISSION_DENIED and "loopback" in err.message
    assert proxy.log.paths() == []


def test_proxied_literal_private_target_is_refused(proxy):
    err = fetch_error(["http://169.254.169.254/latest/meta-data/"], FetchPolicy(), environ=env_with(proxy))
    assert err.code is Code.PERMISSION_DENIED
    assert proxy.log.paths() == []


def test_proxied_target_that_cannot_be_resolved_here_goes_to_the_proxy(proxy):
    resolver = static_resolver({})  # the proxy resolves names this host cannot
    out = fetch(["http://images.example/a.png"], FetchPolicy(), environ=env_with(proxy), resolver=resolver)
    assert out == [b"proxied:http://images.example/a.png"]


def test_domain_allowlist_applies_when_proxied(proxy):
    policy = FetchPolicy(allowed_media_domains=("images.example",))
    resolver = static_resolver({})
    env = env_with(proxy)
    assert fetch(["http://images.example/a.png"], policy, environ=env, resolver=resolver) == [b"proxied:http://images.example/a.png"]
    err = fetch_error(["http://other.example/a.png"], policy, environ=env, resolver=resolver)
    assert err.code is Code.PERMISSION_DENIED and "allowed_media_domains" in err.message
    assert proxy.log.paths() == ["http://images.example/a.png"]


def test_unsupported_proxy_scheme_is_unavailable():
    err = fetch_error(["http://images.example/a.png"], FetchPolicy(), environ={"ALL_PROXY": "socks5://127.0.0.1:1"}, resolver=static_resolver({}))
    assert err.code is Code.UNAVAILABLE and "socks5" in err.message


def test_https_through_the_proxy_verifies_the_target_name(proxy, tmp_path):
    cert, key = make_cert(tmp_path, "pinned.test")
    sni: list = []
    with serve(OriginHandler, tls=tls_server_context(cert, key, sni)) as (port, _log):
        env = {"HTTPS_PROXY": f"http://127.0.0.1:{proxy.port}"}
        ctx = ssl.create_default_context(cafile=str(cert))
        out = fetch([f"https://pinned.test:{port}/echo-host"], FetchPolicy(), environ=env, resolver=static_resolver({}), ssl_context=ctx)
    assert out == [f"pinned.test:{port}".encode()]
    assert proxy.log.paths() == [f"CONNECT pinned.test:{port}"]
    assert sni == ["pinned.test"]
