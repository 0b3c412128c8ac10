"""Inline sources (bytes, data URLs, bare base64), the item cap, the byte budget, FetchPolicy."""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fetch_helpers import fetch, fetch_error
from media_servers import payload
from sglang_mm_grpc.core.errors import Code
from sglang_mm_grpc.media import FetchPolicy, MediaFetcher
from sglang_mm_grpc.media.failures import human_bytes
from sglang_mm_grpc.media.sources import base64_size, classify, describe, redact_url

PNG_HEAD = b"\x89PNG\r\n\x1a\n" + payload(300)
B64 = base64.b64encode(PNG_HEAD).decode()


# --- data URLs and base64 -------------------------------------------------------------


def test_data_url_good():
    assert fetch([f"data:image/png;base64,{B64}"]) == [PNG_HEAD]


def test_data_url_case_and_parameters():
    assert fetch([f"DATA:image/png;charset=x;BASE64,{B64}"]) == [PNG_HEAD]


def test_bare_base64_and_raw_bytes_in_order():
    assert fetch([B64, PNG_HEAD, bytearray(b"abc")]) == [PNG_HEAD, PNG_HEAD, b"abc"]


def test_jpeg_base64_starting_with_slash_is_base64_not_a_path():
    jpeg = b"\xff\xd8\xff\xe0" + payload(200)
    text = base64.b64encode(jpeg).decode()
    assert text.startswith("/9j/")
    assert fetch([text]) == [jpeg]


def test_non_base64_data_url_is_invalid():
    err = fetch_error(["data:image/png,rawbytes"])
    assert err.code is Code.INVALID_ARGUMENT and err.item == 0
    assert "base64" in err.message


def test_data_url_without_comma_is_invalid():
    assert fetch_error(["data:image/png;base64"]).code is Code.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "payload_text, cause",
    [
        ("QUJ", "multiple of 4"),  # missing padding
        ("QQ==QUJD", "padding before the end"),
        ("QU!D", "base64"),
        ("QUJD\nQU!D", "base64"),  # line breaks are dropped (base64 wraps at 76), the rest is checked
        ("Q===", "base64"),
    ],
)
def test_bad_base64_is_invalid(payload_text, cause):
    for source in (f"data:image/png;base64,{payload_text}", payload_text):
        err = fetch_error(["data:image/png;base64,QUJD", source])
        assert err.code is Code.INVALID_ARGUMENT, source
        assert err.item == 1
        assert cause in err.message


@pytest.mark.parametrize("source", ["ftp://example.com/a.png", "gopher://x/", "javascript:alert(1)", "C:\\img.png"])
def test_unsupported_scheme_is_invalid(source):
    err = fetch_error([source])
    assert err.code is Code.INVALID_ARGUMENT
    assert "scheme" in err.message


@pytest.mark.parametrize("source", ["", "   ", b""])
def test_empty_source_is_invalid(source):
    err = fetch_error([source])
    assert err.code is Code.INVALID_ARGUMENT and "empty" in err.message


def test_relative_path_is_not_base64():
    err = fetch_error(["images/cat.png"])
    assert err.code is Code.INVALID_ARGUMENT
    assert err.message.startswith("image 0: images/cat.png: looks like a relative file name")
    err = fetch_error(["not-base64"])
    assert "not a URL, an absolute path or valid base64" in err.message


def test_base64_wrapped_in_lines_decodes():
    assert fetch(["QUJD\nQUJE\n", "data:image/png;base64,QUJD\r\nQUJE"]) == [b"ABCABD", b"ABCABD"]


def test_wrong_type_is_invalid():
    assert fetch_error([123]).code is Code.INVALID_ARGUMENT


def test_message_never_contains_the_payload():
    err = fetch_error([f"data:image/png;base64,{B64[:-1]}"])
    assert B64[:40] not in err.message
    assert f"data:image/png;base64,…({len(B64) - 1} chars)" in err.message


def test_large_base64_is_decoded_in_chunks():
    big = payload(9 << 20)
    assert fetch([base64.b64encode(big).decode()], FetchPolicy()) == [big]


def test_base64_size_is_exact():
    for n in range(0, 40):
        data = payload(n)
        text = base64.b64encode(data).decode()
        if n:
            assert base64_size(text) == n


# --- redaction --------------------------------------------------------------------------


def test_redact_url_hides_credentials_and_query():
    shown = redact_url("https://alice:s3cret@images.example:8443/a/b.png?token=xyz#frag")
    assert shown == "https://***@images.example:8443/a/b.png?…"


def test_describe_each_kind():
    assert describe(b"abcd") == "<4 bytes>"
    assert describe("data:image/png;base64,QUJD") == "data:image/png;base64,…(4 chars)"
    assert describe("QUJDQUJD") == "base64,…(8 chars)"
    assert describe("/srv/img/a.png") == "/srv/img/a.png"
    assert describe("http://u:p@h/x?q=1") == "http://***@h/x?…"


def test_classify_kinds():
    assert classify(b"x").kind == "bytes"
    assert classify("https://h/x").kind == "http"
    assert classify("file:///a/b").value == "/a/b"
    assert classify("file://localhost/a%20b").value == "/a b"
    assert classify("/a/b.png").kind == "file"
    with pytest.raises(Exception):
        classify("file://otherhost/a")


# --- budget (the image count is the request's, checked before the fetch: test_service_fetch) ---


def test_inline_budget_is_checked_before_any_fetch(origin):
    policy = FetchPolicy(allow_private_hosts=True, request_byte_budget=1000)
    sources = [origin.url("/bytes/10"), payload(600), base64.b64encode(payload(600)).decode()]
    err = fetch_error(sources, policy)
    assert err.code is Code.RESOURCE_EXHAUSTED
    assert err.item == 2
    assert "request_byte_budget (1000 B)" in err.message
    assert origin.log.paths() == []


def test_budget_shared_by_remote_sources(origin):
    policy = FetchPolicy(allow_private_hosts=True, request_byte_budget=1000)
    assert len(fetch([origin.url("/bytes/400"), origin.url("/bytes/400")], policy)) == 2
    err = fetch_error([origin.url("/bytes/400")] * 3, policy)
    assert err.code is Code.RESOURCE_EXHAUSTED and "request_byte_budget" in err.message


def test_budget_shared_by_inline_and_remote(origin):
    policy = FetchPolicy(allow_private_hosts=True, request_byte_budget=1000)
    err = fetch_error([payload(700), origin.url("/bytes/400")], policy)
    assert err.code is Code.RESOURCE_EXHAUSTED and err.item == 1


def test_budget_charged_while_streaming_without_content_length(origin):
    policy = FetchPolicy(allow_private_hosts=True, request_byte_budget=1 << 20, max_remote_bytes=64 << 20)
    err = fetch_error([origin.url("/endless")], policy)
    assert err.code is Code.RESOURCE_EXHAUSTED and "request_byte_budget (1 MiB)" in err.message


# --- policy -------------------------------------------------------------------------------------


def test_policy_defaults(monkeypatch):
    monkeypatch.delenv("REQUEST_TIMEOUT", raising=False)
    p = FetchPolicy()
    assert (p.request_byte_budget, p.max_remote_bytes) == (1_342_177_280, 64 << 20)
    assert (p.fetch_timeout_s, p.max_redirects, p.max_concurrent_fetches) == (3.0, 10, 32)
    assert p.allowed_local_media_path is None and p.allowed_media_domains is None
    assert not p.allow_private_hosts
    assert human_bytes(p.request_byte_budget) == "1.25 GiB"


def test_policy_from_env(monkeypatch):
    monkeypatch.setenv("REQUEST_TIMEOUT", "7.5")
    assert FetchPolicy.from_env().fetch_timeout_s == 7.5
    assert FetchPolicy().fetch_timeout_s == 7.5
    assert FetchPolicy.from_env(fetch_timeout_s=1).fetch_timeout_s == 1.0
    assert FetchPolicy.from_env({"REQUEST_TIMEOUT": "2"}).fetch_timeout_s == 2.0
    monkeypatch.setenv("REQUEST_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="REQUEST_TIMEOUT"):
        FetchPolicy.from_env()
    with pytest.raises(TypeError):
        FetchPolicy.from_env({}, max_itemz=3)


def test_policy_validation(tmp_path):
    with pytest.raises(ValueError):
        FetchPolicy(request_byte_budget=0)
    with pytest.raises(ValueError):
        FetchPolicy(fetch_timeout_s=0)
    with pytest.raises(ValueError):
        FetchPolicy(allowed_local_media_path=str(tmp_path / "missing"))
    with pytest.raises(ValueError):
        FetchPolicy(allowed_media_domains="example.com")
    p = FetchPolicy(allowed_media_domains=("Images.Example.", "cdn.example"), allowed_local_media_path=str(tmp_path))
    assert p.allowed_media_domains == ("images.example", "cdn.example")
    assert p.domain_allowed("IMAGES.example") and not p.domain_allowed("evil.example")
    assert FetchPolicy(allowed_media_domains=()).allowed_media_domains is None


def test_fetcher_reads_policy_from_env_by_default(monkeypatch):
    monkeypatch.setenv("REQUEST_TIMEOUT", "4")
    assert MediaFetcher(environ={}).policy.fetch_timeout_s == 4.0


@given(st.text(alphabet=st.sampled_from("AZaz09+/=\t\n\r\x0b\x0c\x1c\x1f \u00a0\u2028é"), max_size=200))
def test_whitespace_is_dropped_as_the_regex_drops_it(text):
    """The ASCII fast path removes exactly what ``\\s`` does; other text takes the regex."""
    from sglang_mm_grpc.media.sources import _compact

    assert _compact(text) == re.sub(r"\s+", "", text)
