"""Cloud metadata addresses stay refused when private hosts are allowed: as a literal, as a
name's answer, in IPv6 forms that carry them, and on a redirect hop; only the separate
``allow_metadata_hosts`` switch opens them. Every connection goes through a recording
socket layer that dials the local origin instead, so no metadata address is ever
contacted, even if a check failed."""

from __future__ import annotations

import ipaddress
from urllib.parse import quote

import pytest

from fetch_helpers import DialRecorder, fetch, fetch_error, static_resolver
from media_servers import payload
from sglang_mm_grpc.core.errors import Code
from sglang_mm_grpc.media import FetchPolicy
from sglang_mm_grpc.media.ssrf import METADATA_ADDRESSES, address_refusal, metadata_reason

PRIVATE = FetchPolicy(allow_private_hosts=True)
METADATA = ["169.254.169.254", "fd00:ec2::254", "100.100.100.200"]


def _kw(origin, table=None):
    recorder = DialRecorder(origin.port)
    resolver = static_resolver({"localhost": ["127.0.0.1"], **(table or {})})
    return recorder, dict(resolver=resolver, network_backend=recorder)


@pytest.mark.parametrize("address, shown", [
    ("169.254.169.254", "cloud metadata"),
    ("fd00:ec2::254", "cloud metadata"),
    ("100.100.100.200", "cloud metadata"),
    ("::ffff:169.254.169.254", "cloud metadata (IPv4-mapped)"),
    ("64:ff9b::a9fe:a9fe", "cloud metadata (NAT64)"),
    ("2002:a9fe:a9fe::", "cloud metadata (6to4)"),
])
def test_metadata_addresses_are_named(address, shown):
    ip = ipaddress.ip_address(address)
    assert metadata_reason(ip) == shown
    assert address_refusal(ip, allow_private=True) == shown
    assert address_refusal(ip, allow_private=True, allow_metadata=True) is None
    assert address_refusal(ip, allow_private=False, allow_metadata=True) is not None  # still private


def test_the_list_is_the_documented_one():
    assert {str(a) for a in METADATA_ADDRESSES} == set(METADATA)
    for near in ("169.254.169.253", "100.100.100.201", "fd00:ec2::253", "10.0.0.1"):
        assert metadata_reason(ipaddress.ip_address(near)) is None


@pytest.mark.parametrize("address", METADATA)
def test_literal_refused_with_private_hosts_allowed(origin, address):
    recorder, kw = _kw(origin)
    host = f"[{address}]" if ":" in address else address
    err = fetch_error([f"http://{host}:{origin.port}/latest/meta-data/"], PRIVATE, **kw)
    assert err.code is Code.PERMISSION_DENIED
    assert "cloud metadata address (metadata hosts are not allowed)" in err.message
    assert recorder.dialled == [] and origin.log.paths() == []


@pytest.mark.parametrize("address", METADATA)
def test_redirect_to_metadata_refused_with_private_hosts_allowed(origin, address):
    recorder, kw = _kw(origin)
    host = f"[{address}]" if ":" in address else address
    first = origin.url("/redirect?to=" + quote(f"http://{host}/latest/meta-data/iam/"), host="127.0.0.1")
    err = fetch_error([first], PRIVATE, **kw)
    assert err.code is Code.PERMISSION_DENIED
    assert "redirect 1 to" in err.message and "cloud metadata" in err.message
    assert recorder.dialled == [("127.0.0.1", origin.port)]  # the origin only
    assert len(origin.log.paths()) == 1


def test_redirect_to_a_name_that_resolves_to_metadata(origin):
    recorder, kw = _kw(origin, {"metadata.internal": ["169.254.169.254"]})
    first = origin.url("/redirect?to=" + quote(f"http://metadata.internal:{origin.port}/x"), host="127.0.0.1")
    err = fetch_error([first], PRIVATE, **kw)
    assert err.code is Code.PERMISSION_DENIED
    assert "metadata.internal resolves to 169.254.169.254, a cloud metadata address" in err.message
    assert recorder.dialled == [("127.0.0.1", origin.port)]


def test_a_name_with_one_metadata_answer_is_refused(origin):
    recorder, kw = _kw(origin, {"mixed.test": ["127.0.0.1", "fd00:ec2::254"]})
    err = fetch_error([f"http://mixed.test:{origin.port}/bytes/3"], PRIVATE, **kw)
    assert err.code is Code.PERMISSION_DENIED and "fd00:ec2::254" in err.message
    assert recorder.dialled == []


def test_the_explicit_switch_allows_them(origin):
    recorder, kw = _kw(origin, {"metadata.internal": ["169.254.169.254"]})
    policy = FetchPolicy(allow_private_hosts=True, allow_metadata_hosts=True)
    first = origin.url("/redirect?to=" + quote(f"http://metadata.internal:{origin.port}/bytes/7"), host="127.0.0.1")
    assert fetch([first], policy, **kw) == [payload(7)]
    assert recorder.dialled == [("127.0.0.1", origin.port), ("169.254.169.254", origin.port)]


def test_metadata_switch_alone_does_not_open_private_hosts(origin):
    recorder, kw = _kw(origin, {"metadata.internal": ["169.254.169.254"]})
    err = fetch_error([f"http://metadata.internal:{origin.port}/x"], FetchPolicy(allow_metadata_hosts=True), **kw)
    assert err.code is Code.PERMISSION_DENIED and "link-local" in err.message
    assert recorder.dialled == []


def test_refusals_are_counted_as_metadata(origin):
    import asyncio

    from fetch_helpers import make_fetcher
    from sglang_mm_grpc.core.errors import PreprocessError

    async def go():
        async with make_fetcher(PRIVATE) as fetcher:
            with pytest.raises(PreprocessError):
                await fetcher.fetch_all(["http://169.254.169.254/latest/meta-data/"])
            return fetcher.stats

    assert asyncio.run(go())["refusals"] == {"metadata_address": 1}
