"""One http(s) source -> bytes: redirects followed by hand, every hop checked, body capped.

Each hop is checked before it is requested: scheme, the domain allowlist, and (for IP
literals) the address. Direct connections are checked again where the socket is opened
(``transport.PinnedBackend``); a proxied hop's target is resolved here, when it can be,
and refused if any answer is non-public, since the proxy would otherwise reach it for us.
The body is capped at ``max_remote_bytes`` (Content-Length first, then counted) and
charged to the request budget as it arrives. We ask for ``identity``; a server that
compresses anyway (gzip or deflate) is inflated here in bounded steps, so a small
compressed body can never expand past the cap in memory; other encodings are refused.
"""

from __future__ import annotations

import zlib
from typing import Callable

import httpx

from .budget import ByteBudget
from .failures import FetchFailure, exhausted, human_bytes, malformed, refused, timed_out, unavailable
from .policy import FetchPolicy
from .sources import redact_url
from .ssrf import AddressRefused, ResolveFailed, Resolver, address_refusal, parse_ip, resolve_checked
from .transport import Clients

_REDIRECT_STATUSES = (301, 302, 303, 307, 308)
# Largest piece inflated at once (zlib builds its output in blocks and then joins them,
# so one step briefly holds twice its size): the size of a network read, so inflated
# pieces are allocated like plain ones (from the heap, reusing freed chunks).
_INFLATE_STEP = 1 << 16


def parse_http_url(url: str | httpx.URL) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise malformed(f"invalid URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise malformed(f"unsupported URL scheme {parsed.scheme!r} (expected http or https)")
    if not parsed.host:
        raise malformed("URL has no host")
    return parsed


def check_target(url: httpx.URL, policy: FetchPolicy) -> None:
    """Checks that need no network: allowlist and literal addresses."""
    if not policy.domain_allowed(url.host):
        raise refused("domain_not_allowed", f"host {url.host} is not in allowed_media_domains")
    literal = parse_ip(url.host)
    if literal is not None:
        reason = address_refusal(
            literal, allow_private=policy.allow_private_hosts, allow_metadata=policy.allow_metadata_hosts
        )
        if reason is not None:
            raise refused(*_refusal(f"{literal} is a {reason} address", reason))


def _refusal(text: str, reason: str) -> tuple[str, str]:
    """(refusal counter, message) for an address refused with ``reason``."""
    if reason.startswith("cloud metadata"):
        return "metadata_address", f"{text} (metadata hosts are not allowed)"
    return "private_address", f"{text} (private hosts are not allowed)"


def _describe_error(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _content_length(response: httpx.Response) -> int | None:
    raw = response.headers.get("content-length")
    if raw is None:
        return None
    raw = raw.strip()
    if not raw.isdigit():
        raise unavailable(f"invalid Content-Length {raw[:40]!r}")
    return int(raw)


class _Inflater:
    """A gzip or deflate (zlib) body, inflated at most ``limit`` bytes per step."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self._z = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header, detected

    def inflate(self, data: bytes, limit: int) -> tuple[bytes, bytes]:
        """(output of at most ``limit`` bytes, input not consumed yet)."""
        if data and self._z.eof:
            raise unavailable(f"data after the end of the {self.encoding} body")
        try:
            out = self._z.decompress(data, limit)
        except zlib.error as exc:
            raise unavailable(f"corrupt {self.encoding} body ({exc})") from None
        if self._z.unused_data:  # e.g. a second gzip member: not silently dropped
            raise unavailable(f"data after the end of the {self.encoding} body")
        return out, self._z.unconsumed_tail

    def finish(self) -> None:
        if not self._z.eof:
            raise unavailable(f"truncated {self.encoding} body")


def _inflater(response: httpx.Response) -> _Inflater | None:
    """None for an unencoded body; refuses encodings we did not ask for and cannot bound."""
    raw = response.headers.get("content-encoding", "")
    codings = [c.strip().lower() for c in raw.split(",") if c.strip() and c.strip().lower() != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in ("gzip", "x-gzip", "deflate"):
        return _Inflater(codings[0])
    raise unavailable(f"unsupported Content-Encoding {raw.strip()[:40]!r} (identity was requested)")


class HttpFetcher:
    def __init__(
        self,
        policy: FetchPolicy,
        clients: Clients,
        resolver: Resolver,
        on_bytes: Callable[[int], None] = lambda n: None,
    ):
        self._policy = policy
        self._clients = clients
        self._resolver = resolver
        self._on_bytes = on_bytes

    async def fetch(self, url: str, budget: ByteBudget, timeout: float, cap: tuple[str, int] | None = None) -> bytes:
        """The body of ``url``; ``cap``: (its name, bytes) instead of max_remote_bytes (a video's limit)."""
        current = parse_http_url(url)
        seen = {str(current)}
        redirects = 0
        while True:
            try:
                response = await self._send(current, timeout)
            except FetchFailure as exc:
                if redirects:
                    raise FetchFailure(
                        exc.code, f"redirect {redirects} to {redact_url(str(current))}: {exc.cause}", reason=exc.reason
                    ) from None
                raise
            try:
                if response.status_code in _REDIRECT_STATUSES and "location" in response.headers:
                    current = self._next_hop(current, response.headers["location"], redirects, seen)
                    redirects += 1
                    continue
                if response.status_code >= 400:
                    raise unavailable(f"HTTP {response.status_code} {response.reason_phrase}".rstrip())
                if not 200 <= response.status_code < 300:
                    raise unavailable(f"unexpected HTTP {response.status_code} {response.reason_phrase}".rstrip())
                return await self._read_body(response, budget, cap or ("max_remote_bytes", self._policy.max_remote_bytes))
            except httpx.TimeoutException as exc:
                raise timed_out(f"timed out reading the response ({_describe_error(exc)})") from None
            except httpx.HTTPError as exc:
                raise unavailable(f"connection error while reading the response ({_describe_error(exc)})") from None
            finally:
                await response.aclose()

    def _next_hop(self, current: httpx.URL, location: str, redirects: int, seen: set[str]) -> httpx.URL:
        try:
            target = current.join(location)
        except (httpx.InvalidURL, ValueError) as exc:
            raise unavailable(f"redirect {redirects + 1} has an invalid Location: {exc}") from None
        if target.scheme not in ("http", "https"):
            raise refused("scheme", f"redirect {redirects + 1} to a {target.scheme!r} URL is not allowed")
        if str(target) in seen:
            raise unavailable(f"redirect loop: redirect {redirects + 1} returns to {redact_url(str(target))}")
        if redirects >= self._policy.max_redirects:
            raise exhausted("max_redirects", f"more than max_redirects ({self._policy.max_redirects}) redirects")
        seen.add(str(target))
        return target

    async def _send(self, url: httpx.URL, timeout: float) -> httpx.Response:
        url = parse_http_url(url)
        check_target(url, self._policy)
        try:
            client, proxy = self._clients.for_url(url)
            if proxy is not None and not (self._policy.allow_private_hosts and self._policy.allow_metadata_hosts):
                await self._check_proxied_target(url)
            request = client.build_request("GET", url, timeout=httpx.Timeout(timeout))
            return await client.send(request, stream=True)
        except AddressRefused as exc:
            raise refused(*_refusal(str(exc), exc.reason)) from None
        except ResolveFailed as exc:
            raise unavailable(str(exc)) from None
        except httpx.TimeoutException as exc:
            raise timed_out(f"timed out connecting ({_describe_error(exc)})") from None
        except httpx.ProxyError as exc:
            raise unavailable(f"proxy error ({_describe_error(exc)})") from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise malformed(f"invalid URL: {exc}") from None
        except httpx.HTTPError as exc:
            raise unavailable(f"connection failed ({_describe_error(exc)})") from None

    async def _check_proxied_target(self, url: httpx.URL) -> None:
        """Refuse a proxied target whose name resolves here to a non-public address.

        A name this host cannot resolve is left to the proxy: in proxied networks that is
        the normal case, and the proxy is the operator's own policy point.
        """
        try:
            await resolve_checked(
                url.host, url.port or (443 if url.scheme == "https" else 80), self._resolver,
                allow_private=self._policy.allow_private_hosts, allow_metadata=self._policy.allow_metadata_hosts,
            )
        except ResolveFailed:
            return

    async def _read_body(self, response: httpx.Response, budget: ByteBudget, cap: tuple[str, int]) -> bytes:
        declared = _content_length(response)
        reserved = 0
        if declared is not None:
            if declared > cap[1]:
                raise exhausted(cap[0], f"Content-Length {declared} exceeds {cap[0]} ({human_bytes(cap[1])})")
            budget.reserve(declared)
            reserved = declared
        inflater = _inflater(response)
        chunks: list[bytes] = []
        try:
            return await self._read_chunks(response, budget, inflater, reserved, chunks, cap)
        finally:
            chunks.clear()  # on failure, freed now, whatever still holds this frame

    async def _read_chunks(
        self, response: httpx.Response, budget: ByteBudget, inflater: _Inflater | None, reserved: int, chunks: list[bytes],
        limit: tuple[str, int],
    ) -> bytes:
        name, cap = limit
        received, wire = 0, 0
        # Raw bytes: httpx would inflate a whole network read at once, unbounded.
        async for raw in response.aiter_raw():
            self._on_bytes(len(raw))
            wire += len(raw)
            if wire > cap:  # the cap holds for what crosses the wire too (endless empty deflate blocks)
                raise exhausted(name, f"body exceeds {name} ({human_bytes(cap)}): {wire} bytes received")
            pending, more = raw, True
            while more:
                if inflater is None:
                    chunk, more = pending, False
                else:
                    step = min(cap - received + 1, _INFLATE_STEP)
                    chunk, pending = inflater.inflate(pending, step)
                    more = bool(pending) or len(chunk) == step  # a full step may leave output in zlib
                received += len(chunk)
                if received > cap:
                    raise exhausted(name, f"body exceeds {name} ({human_bytes(cap)}): {received} bytes received")
                if received > reserved:
                    budget.reserve(received - reserved)
                    reserved = received
                chunks.append(chunk)
        if inflater is not None and received:
            inflater.finish()
        budget.release(reserved - received)
        if received == 0:
            raise unavailable(f"HTTP {response.status_code} with an empty body")
        return b"".join(chunks)
