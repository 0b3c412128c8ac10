"""Which addresses a fetch may reach, and the one DNS lookup whose answer is dialled.

A client-supplied URL must not reach the service's own network: loopback, private
ranges, link-local (cloud metadata at 169.254.169.254), CGNAT, multicast, reserved and
unspecified addresses. IPv6 forms that carry an IPv4 address (IPv4-mapped, 6to4,
NAT64) are judged by the IPv4 address they carry. Names are resolved once and the
checked answer is what gets connected to, so a second, different DNS answer (rebinding)
never matters.

Cloud metadata services (``METADATA_ADDRESSES``: AWS/GCP/Azure/OCI 169.254.169.254, AWS's
IPv6 fd00:ec2::254, Alibaba's 100.100.100.200) stay refused when private hosts are
allowed: only ``allow_metadata`` lets a fetch reach them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Awaitable, Callable, Sequence, Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
# (host, port) -> IP address strings, in preference order.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
# Instance metadata endpoints: credentials live there, so allowing private hosts (a trusted
# network, tests) never opens them; they have their own switch.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)


class AddressRefused(Exception):
    """Raised where a connection would be made to a refused address."""

    def __init__(self, host: str, address: str, reason: str):
        self.host, self.address, self.reason = host, address, reason
        where = address if host == address else f"{host} resolves to {address}"
        super().__init__(f"{where}, a {reason} address")


class ResolveFailed(Exception):
    """The name has no address (NXDOMAIN, no network, ...)."""


def parse_ip(host: str) -> IPAddress | None:
    """The address if ``host`` is an IP literal (brackets and IPv6 zone allowed), else None."""
    text = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip in _SIX_TO_FOUR:
        return "6to4", ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
    if ip in _NAT64_WELL_KNOWN:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be fetched from (e.g. ``"loopback"``), or None if it is public."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            kind, v4 = embedded
            inner = refusal_reason(v4)
            if inner is not None:
                return f"{inner} ({kind})"
            if kind != "6to4":
                return None  # a public IPv4 address, reached as itself or through NAT64
            # 6to4 of a public address: the IPv6 checks below decide.
        if ip in _NAT64_LOCAL:
            return "private (local-use NAT64)"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "shared (CGNAT)"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        return "non-global"
    return None


def metadata_reason(ip: IPAddress) -> str | None:
    """``"cloud metadata"`` (with how it was reached) when ``ip`` is a metadata address,
    also inside an IPv6 form that carries it (IPv4-mapped, 6to4, NAT64); else None."""
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None and embedded[1] in METADATA_ADDRESSES:
            return f"cloud metadata ({embedded[0]})"
    return None


def address_refusal(ip: IPAddress, *, allow_private: bool, allow_metadata: bool = False) -> str | None:
    """Why a fetch must not reach ``ip`` under these switches, or None (a metadata
    address is named as such only when private hosts are allowed: otherwise it is
    refused, and named, as the link-local or shared address it also is)."""
    if not allow_private:
        reason = refusal_reason(ip)
        if reason is not None:
            return reason
    return None if allow_metadata else metadata_reason(ip)


async def system_resolver(host: str, port: int) -> list[str]:
    """All addresses of ``host`` from the system resolver, duplicates removed."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolveFailed(f"cannot resolve {host}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def resolve_checked(
    host: str, port: int, resolver: Resolver, *, allow_private: bool, allow_metadata: bool = False
) -> list[str]:
    """Resolve once and return the addresses to dial.

    Any refused address in the answer refuses the host: a name that points at both a
    public and a private address is not one to trust. Metadata addresses are refused
    unless ``allow_metadata``, whatever ``allow_private`` says.
    """
    literal = parse_ip(host)
    addresses = [str(literal)] if literal is not None else list(await resolver(host, port))
    if not addresses:
        raise ResolveFailed(f"cannot resolve {host}: no addresses")
    if not (allow_private and allow_metadata):
        for address in addresses:
            ip = parse_ip(address)
            if ip is None:
                reason = None if allow_private else "unparseable"
            else:
                reason = address_refusal(ip, allow_private=allow_private, allow_metadata=allow_metadata)
            if reason is not None:
                raise AddressRefused(host, address, reason)
    return addresses
