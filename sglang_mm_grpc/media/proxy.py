"""Which proxy, if any, a URL goes through: the environment variables and rules of ``requests``.

``http_proxy`` / ``https_proxy`` / ``all_proxy`` pick the proxy by the target's scheme
(lowercase names win over uppercase; an empty lowercase value unsets). ``no_proxy``
(or, if it is empty, ``NO_PROXY``) lists hosts reached directly:

* entries are comma-separated, trimmed, lowercased, leading dots stripped, empties ignored;
* ``*`` matches every host;
* an IPv4 CIDR ``a.b.c.d/n`` matches IPv4-literal hosts in that network, never names;
* ``host:port`` matches that host (or a subdomain) only when the URL names that port explicitly;
* any other entry matches the host exactly or as a dot-suffix: ``internal`` matches
  ``internal`` and ``images.internal``, not ``notinternal`` (IP literals match exactly).

The environment is read once, when the fetcher is built.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Mapping


def _env_value(environ: Mapping[str, str], name: str) -> str | None:
    """``name`` (lowercase) wins over ``NAME``; a set-but-empty lowercase value means unset."""
    if name in environ:
        return environ[name].strip() or None
    value = environ.get(name.upper(), "").strip()
    return value or None


def _with_scheme(proxy_url: str) -> str:
    return proxy_url if "://" in proxy_url else f"http://{proxy_url}"


def _split_host_port(entry: str) -> tuple[str, int | None]:
    """``host:port`` / ``[v6]:port`` -> (host, port); a bare IPv6 literal has no port."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return host, int(port) if port.isdigit() else None
    if entry.count(":") == 1:
        host, port = entry.split(":")
        if port.isdigit():
            return host, int(port)
    return entry, None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class NoProxyRule:
    host: str = ""
    port: int | None = None
    network: ipaddress.IPv4Network | None = None
    everything: bool = False

    @classmethod
    def parse(cls, entry: str) -> "NoProxyRule | None":
        entry = entry.strip().lower().lstrip(".")
        if not entry:
            return None
        if entry == "*":
            return cls(everything=True)
        if "/" in entry:
            try:
                return cls(network=ipaddress.IPv4Network(entry, strict=False))
            except ValueError:
                return None  # requests ignores CIDR entries it cannot parse
        host, port = _split_host_port(entry)
        return cls(host=host.lstrip("."), port=port)

    def matches(self, host: str, port: int | None) -> bool:
        """``port`` is the URL's explicit port (None when the URL names none)."""
        if self.everything:
            return True
        if self.network is not None:
            try:
                return ipaddress.IPv4Address(host) in self.network
            except ValueError:
                return False
        if self.port is not None and self.port != port:
            return False
        if host == self.host:
            return True
        # IP literals match only exactly: "2.3" is not a suffix of "10.1.2.3".
        return not _is_ip(host) and host.endswith("." + self.host)


@dataclass(frozen=True)
class ProxyConfig:
    http: str | None = None
    https: str | None = None
    all: str | None = None
    no_proxy: tuple[NoProxyRule, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ProxyConfig":
        env = os.environ if environ is None else environ
        proxies = {}
        for scheme in ("http", "https", "all"):
            value = _env_value(env, f"{scheme}_proxy")
            proxies[scheme] = _with_scheme(value) if value else None
        # requests: ``no_proxy`` if set and non-empty, else ``NO_PROXY``.
        raw_no_proxy = env.get("no_proxy") or env.get("NO_PROXY") or ""
        rules = tuple(r for r in map(NoProxyRule.parse, raw_no_proxy.split(",")) if r is not None)
        return cls(no_proxy=rules, **proxies)

    def bypass(self, host: str, port: int | None = None) -> bool:
        host = host.lower().strip("[]")
        return any(rule.matches(host, port) for rule in self.no_proxy)

    def proxy_for(self, scheme: str, host: str, port: int | None = None) -> str | None:
        """The proxy URL for a request, or None to connect directly."""
        proxy = (self.https if scheme == "https" else self.http if scheme == "http" else None) or self.all
        if proxy is None or self.bypass(host, port):
            return None
        return proxy
