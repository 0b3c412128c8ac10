"""Helpers for the fetch tests: a fetcher that ignores ambient proxy settings, a table
resolver (no real DNS) and a socket layer that records where connections were pointed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpcore
import pytest

from media_servers import Log
from sglang_mm_grpc.core.errors import PreprocessError
from sglang_mm_grpc.media import FetchPolicy, MediaFetcher


@dataclass
class Server:
    port: int
    log: Log

    def url(self, path: str, host: str = "localhost") -> str:
        return f"http://{host}:{self.port}{path}"


def make_fetcher(policy: FetchPolicy | None = None, **kwargs) -> MediaFetcher:
    """A fetcher with no proxy variables unless ``environ`` is given."""
    kwargs.setdefault("environ", {})
    return MediaFetcher(policy or FetchPolicy(allow_private_hosts=True), **kwargs)


def fetch(sources, policy: FetchPolicy | None = None, *, deadline=None, **kwargs) -> list[bytes]:
    """Fetch in a fresh event loop with a fresh fetcher; returns the bytes or raises."""

    async def go():
        async with make_fetcher(policy, **kwargs) as fetcher:
            return await fetcher.fetch_all(sources, deadline)

    return asyncio.run(go())


def fetch_error(sources, policy: FetchPolicy | None = None, **kwargs) -> PreprocessError:
    with pytest.raises(PreprocessError) as info:
        fetch(sources, policy, **kwargs)
    return info.value


def static_resolver(table: dict[str, list[str]], calls: list | None = None):
    """A resolver from a table; names not in it fail to resolve (no real DNS is used)."""
    from sglang_mm_grpc.media.ssrf import ResolveFailed

    async def resolve(host: str, port: int):
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise ResolveFailed(f"cannot resolve {host}: not in the test table")
        return table[host]

    return resolve


class DialRecorder(httpcore.AsyncNetworkBackend):
    """The socket layer under the pinning: records the address each connection was asked
    for, then dials the local test server instead, so public addresses in tests are
    classified and "dialled" without ever being contacted."""

    def __init__(self, port: int):
        self.port = port
        self.dialled: list[tuple[str, int]] = []
        self._real = httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.dialled.append((host, port))
        return await self._real.connect_tcp("127.0.0.1", self.port, timeout=timeout)

    async def sleep(self, seconds):
        await self._real.sleep(seconds)
