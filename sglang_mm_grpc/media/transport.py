"""httpx clients whose direct connections go only to checked addresses.

Pinning happens at the one place a socket is opened: an httpcore network backend that
resolves the host once, refuses it if any answer is a non-public address, and dials the
checked address itself. TLS still verifies the certificate against the URL's hostname
(httpcore passes the origin host as SNI/``server_hostname``) and the Host header is the
URL's, so nothing about the request changes except where the socket goes.

Proxied requests use a plain connection to the proxy (the operator chose it); their
target is checked by the caller before sending (see ``remote.py``).
"""

from __future__ import annotations

import ssl
from typing import NoReturn, Optional

import httpcore
import httpx

from .failures import unavailable
from .policy import FetchPolicy
from .pools import ConnectionPool, ProxyPool
from .proxy import ProxyConfig
from .sources import redact_url
from .ssrf import Resolver, resolve_checked

_USER_AGENT = "sglang-mm-grpc"


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Resolve once, check, connect to the checked address."""

    def __init__(
        self, resolver: Resolver, *, allow_private: bool, allow_metadata: bool = False,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ):
        self._resolver = resolver
        self._allow_private = allow_private
        self._allow_metadata = allow_metadata
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        addresses = await resolve_checked(
            host, port, self._resolver, allow_private=self._allow_private, allow_metadata=self._allow_metadata
        )
        last_error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as exc:
                last_error = exc
        try:
            raise last_error  # type: ignore[misc]
        finally:
            del last_error  # the error's traceback holds this frame: no cycle back to it

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are not used for media")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# httpcore -> httpx exceptions, most specific first (what httpx's own transport does).
_EXCEPTIONS = (
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def _as_httpx(exc: Exception) -> Exception:
    for core_type, httpx_type in _EXCEPTIONS:
        if isinstance(exc, core_type):
            return httpx_type(str(exc) or type(exc).__name__)
    return exc


def _raise_as_httpx(exc: Exception) -> NoReturn:
    """Raise ``exc`` as its httpx type (``from exc``), or as itself.

    No frame may keep the raised error in a local: its traceback holds that frame, and
    the cycle would keep every frame of the failed fetch (its body so far) until the
    cyclic GC runs.
    """
    mapped = _as_httpx(exc)
    try:
        if mapped is exc:
            raise exc
        raise mapped from exc
    finally:
        del mapped, exc


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream):
        self._stream = stream

    async def __aiter__(self):
        try:
            async for part in self._stream:
                yield part
        except Exception as exc:
            _raise_as_httpx(exc)

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class PoolTransport(httpx.AsyncBaseTransport):
    """An httpx transport over any httpcore pool (direct or proxy), public APIs only."""

    def __init__(self, pool):
        self._pool = pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            _raise_as_httpx(exc)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class Clients:
    """One pooled client for direct fetches and one per proxy URL, made on first use."""

    def __init__(
        self,
        policy: FetchPolicy,
        proxies: ProxyConfig,
        resolver: Resolver,
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ):
        self._policy = policy
        self._proxies = proxies
        self._ssl = ssl_context or httpx.create_ssl_context()
        self._backend = PinnedBackend(
            resolver, allow_private=policy.allow_private_hosts, allow_metadata=policy.allow_metadata_hosts,
            inner=network_backend,
        )
        self._clients: dict[str | None, httpx.AsyncClient] = {}

    def _pool_kwargs(self) -> dict:
        n = self._policy.max_concurrent_fetches
        return dict(ssl_context=self._ssl, max_connections=n, max_keepalive_connections=n, keepalive_expiry=30.0)

    def _make(self, proxy_url: str | None) -> httpx.AsyncClient:
        pool: httpcore.AsyncConnectionPool
        if proxy_url is None:
            pool = ConnectionPool(network_backend=self._backend, **self._pool_kwargs())
        else:
            proxy = httpx.Proxy(proxy_url)
            if proxy.url.scheme not in ("http", "https"):
                raise unavailable(f"proxy {redact_url(proxy_url)} is not supported (only http and https proxies)")
            pool = ProxyPool(
                proxy_url=httpcore.URL(
                    scheme=proxy.url.raw_scheme, host=proxy.url.raw_host, port=proxy.url.port, target=proxy.url.raw_path
                ),
                proxy_auth=proxy.raw_auth,
                **self._pool_kwargs(),
            )
        return httpx.AsyncClient(
            transport=PoolTransport(pool),
            trust_env=False,
            follow_redirects=False,
            headers={"User-Agent": _USER_AGENT, "Accept": "image/*,*/*;q=0.5", "Accept-Encoding": "identity"},
        )

    def for_url(self, url: httpx.URL) -> tuple[httpx.AsyncClient, str | None]:
        """The client for ``url`` and the proxy URL it goes through (None when direct)."""
        explicit_port = url.port  # httpx gives None for the scheme's default port
        proxy_url = self._proxies.proxy_for(url.scheme, url.host, explicit_port)
        client = self._clients.get(proxy_url)
        if client is None:
            client = self._clients[proxy_url] = self._make(proxy_url)
        return client, proxy_url

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
