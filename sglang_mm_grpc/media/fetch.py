"""MediaFetcher: a request's image sources -> bytes, under one FetchPolicy.

The order is fixed so limits hold before work is spent: classify every source and
check the item cap, the static URL checks and the inline bytes against the request
budget; then fetch everything concurrently on the event loop (http and files under a
global concurrency cap and a per-fetch timeout bounded by the request deadline). The
first failure cancels the other fetches and is raised as one PreprocessError that names
the image index, the redacted source and the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import AsyncIterator, Literal, Mapping, Sequence

import anyio
import httpcore

from ..core.errors import Code, PreprocessError
from .budget import ByteBudget
from .failures import FetchFailure, exhausted, human_bytes, timed_out
from .remote import HttpFetcher, check_target, parse_http_url
from .local import read_local_file
from .policy import FetchPolicy
from .proxy import ProxyConfig
from .sources import RawSource, Source, classify, decode_base64, describe
from .ssrf import Resolver, system_resolver
from .transport import Clients

__all__ = ["FetchPolicy", "Item", "MediaFetcher"]


@dataclass(frozen=True)
class Item:
    """What a source is, for its limit and its errors: ``kind`` and ``index`` name it
    ("video 2: ..."); ``cap`` (its name, bytes) bounds its bytes whatever the source
    (inline, file or http, streamed bodies cut off as they pass it) instead of
    ``max_remote_bytes`` (None: an image's rules)."""

    kind: str = "image"
    index: int = 0
    cap: tuple[str, int] | None = None


class MediaFetcher:
    """Fetches image sources for requests; one instance per server, shared by all requests
    on one event loop (its connection pool and concurrency cap belong to that loop).
    Close it with ``aclose()`` at shutdown.

    ``resolver``, ``ssl_context`` and ``network_backend`` replace the system resolver,
    the default CA bundle and the socket layer under the address pinning (tests use them
    to point names at local servers). Proxy variables are read from ``environ`` (default
    ``os.environ``) once, here.
    """

    def __init__(
        self,
        policy: FetchPolicy | None = None,
        *,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
        environ: Mapping[str, str] | None = None,
    ):
        self.policy = policy if policy is not None else FetchPolicy.from_env()
        self.proxies = ProxyConfig.from_env(environ)
        resolver = resolver or system_resolver
        self._clients = Clients(
            self.policy, self.proxies, resolver, ssl_context=ssl_context, network_backend=network_backend
        )
        self._http = HttpFetcher(self.policy, self._clients, resolver, on_bytes=self._count_bytes)
        self._slots = asyncio.Semaphore(self.policy.max_concurrent_fetches)
        self._started = 0
        self._failed = 0
        self._bytes = 0
        self._in_flight = 0
        self._refusals: Counter[str] = Counter()

    @property
    def stats(self) -> dict:
        """Counters since start: fetches started/failed and bytes fetched (http and files),
        fetches in flight now, and refusals by reason (a FetchPolicy limit such as
        ``max_remote_bytes``, or a check: ``private_address``, ``domain_not_allowed``,
        ``local_path``, ``not_regular_file``, ``scheme``)."""
        return {
            "fetches_started": self._started,
            "fetches_failed": self._failed,
            "bytes_fetched": self._bytes,
            "in_flight": self._in_flight,
            "refusals": dict(self._refusals),
        }

    def _count_bytes(self, n: int) -> None:
        self._bytes += n

    async def aclose(self) -> None:
        await self._clients.aclose()

    async def __aenter__(self) -> "MediaFetcher":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    async def fetch_all(self, sources: Sequence[RawSource], deadline: float | None = None,
                        items: Sequence[Item] | None = None) -> list[bytes]:
        """Bytes of every source, in order.

        ``deadline`` is an absolute ``time.monotonic()`` value (the RPC deadline) or None.
        ``items[i]``: what source i is (an ``Item`` or its fields as a tuple; default:
        image i). The item cap, the static checks
        and the byte budget for inline sources are applied before any byte is fetched.
        """
        sources = list(sources)
        items = [Item(*it) if isinstance(it, tuple) else it for it in items] if items is not None else [
            Item("image", i) for i in range(len(sources))]
        budget = ByteBudget(self.policy.request_byte_budget)
        admitted = [self._admit(item, raw, budget) for item, raw in zip(items, sources)]
        if all(source.kind == "bytes" for source in admitted):  # nothing to wait for: no task, no loop turn
            return [source.data for source in admitted]
        coroutines = [self._fetch_item(item, raw, source, budget, deadline)
                      for item, raw, source in zip(items, sources, admitted)]
        return await _all_or_nothing(coroutines)

    def _admit(self, item: Item, raw: RawSource, budget: ByteBudget) -> Source:
        with self._failures(item, raw):
            source = classify(raw)
            if source.kind == "http":
                check_target(parse_http_url(source.text), self.policy)
            if source.size is not None:
                if item.cap is not None and source.size > item.cap[1]:
                    name, cap = item.cap
                    raise exhausted(name, f"{source.size} bytes exceed {name} ({human_bytes(cap)})")
                budget.reserve(source.size)
            return source

    async def _fetch_item(self, item: Item, raw: RawSource, source: Source, budget: ByteBudget,
                          deadline: float | None) -> bytes:
        with self._failures(item, raw):
            if source.kind == "bytes":
                return source.data
            if source.kind == "base64":
                return await decode_base64(source.text)
            await self._acquire_slot(deadline)
            try:
                return await self._fetch_in_slot(source, budget, deadline, item.cap)
            finally:
                self._slots.release()

    async def _acquire_slot(self, deadline: float | None) -> None:
        if deadline is None:
            await self._slots.acquire()
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise timed_out("the request deadline passed before the fetch started")
        try:
            async with _timeout(remaining):
                await self._slots.acquire()
            return
        except asyncio.TimeoutError:
            pass  # raised below, outside the handler (see _fetch_in_slot)
        raise timed_out("the request deadline passed while waiting for a fetch slot")

    async def _fetch_in_slot(self, source: Source, budget: ByteBudget, deadline: float | None,
                             cap: tuple[str, int] | None = None) -> bytes:
        timeout = self.policy.fetch_timeout_s
        limit = f"fetch_timeout_s ({timeout:g} s)"
        if deadline is not None and deadline - time.monotonic() < timeout:
            timeout = max(deadline - time.monotonic(), 0.0)
            limit = "the request deadline"
        self._started += 1
        self._in_flight += 1
        try:
            async with _timeout(timeout):
                if source.kind == "file":
                    data = await read_local_file(source.text, self.policy.allowed_local_media_path, budget, cap)
                    self._bytes += len(data)
                    return data
                # httpx gets a looser per-operation backstop; the scope above is the real bound.
                return await _cancelled_once(self._http.fetch(source.text, budget, timeout + 1.0, cap))
        except asyncio.TimeoutError:
            # Raised below, outside this handler: chained to the TimeoutError, our error
            # would lead back (through the timeout's task) to the task that holds it, a
            # cycle keeping the failed fetch's frames until the cyclic GC runs.
            pass
        except Exception:
            self._failed += 1
            raise
        finally:
            self._in_flight -= 1
        self._failed += 1
        raise timed_out(f"timed out after {timeout:.3g} s ({limit})")

    def _failures(self, item: Item, raw: RawSource) -> "_ItemFailures":
        return _ItemFailures(self, item, raw)


class _ItemFailures:
    """Turns any failure of one item into a PreprocessError naming the item and source."""

    def __init__(self, fetcher: MediaFetcher, item: Item, raw: RawSource):
        self._fetcher, self._index, self._kind, self._raw = fetcher, item.index, item.kind, raw

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if exc is None or not isinstance(exc, Exception):
            return False  # success, or cancellation: let it through untouched
        where = describe(self._raw)
        if isinstance(exc, FetchFailure):
            if exc.reason is not None and exc.code in (Code.PERMISSION_DENIED, Code.RESOURCE_EXHAUSTED):
                self._fetcher._refusals[exc.reason] += 1
            raise FetchFailure(exc.code, f"{where}: {exc.cause}", item=self._index, reason=exc.reason,
                               kind=self._kind) from None
        if isinstance(exc, PreprocessError):
            raise PreprocessError(exc.code, f"{where}: {exc.message}", item=self._index, kind=self._kind) from exc
        raise PreprocessError(
            Code.INTERNAL, f"{where}: unexpected {type(exc).__name__}: {exc}", item=self._index, kind=self._kind
        ) from exc


if sys.version_info >= (3, 11):
    _timeout = asyncio.timeout
else:  # Python 3.10

    @contextlib.asynccontextmanager
    async def _timeout(seconds: float) -> AsyncIterator[None]:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a fetch timeout outside a task")
        fired = False

        def fire() -> None:
            nonlocal fired
            fired = True
            task.cancel()

        handle = asyncio.get_running_loop().call_later(seconds, fire)
        try:
            yield
        except asyncio.CancelledError:
            if fired:
                raise asyncio.TimeoutError from None
            raise
        finally:
            handle.cancel()


async def _cancelled_once(coro):
    """Await ``coro`` in its own task, which the caller's cancellation (the RPC's, or the
    fetch deadline's) stops once, through an anyio cancel scope. httpcore guards its
    cleanups with shielded scopes: a scope's cancellation waits until they are done,
    where a plain ``Task.cancel`` lands inside them (in the lock that closes a response)
    and leaves the request and its connection counted in the pool for good. A second
    cancellation of the caller does not reach the task: it still finishes its cleanup."""
    scopes: list[anyio.CancelScope] = []

    async def scoped():
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            return await coro
        raise asyncio.CancelledError  # the scope was cancelled: the caller is gone

    task = asyncio.ensure_future(scoped())
    task.add_done_callback(_retrieve)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            if scopes:
                scopes[0].cancel()
            else:  # not started: it never will
                task.cancel()
                coro.close()
            await asyncio.wait({task})  # if cancelled again here, the task still finishes its cleanup
        raise
    finally:
        del task  # a failure's traceback holds this frame: no cycle through the task


def _retrieve(task: asyncio.Task) -> None:
    """Mark a left task's failure as seen (it was reported through the awaiting side)."""
    if not task.cancelled():
        task.exception()


async def _all_or_nothing(coroutines) -> list:
    """Run concurrently; on the first failure (or our own cancellation) cancel and await the
    rest, so no fetch outlives the request, then raise the lowest-indexed failure."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    if not tasks:
        return []
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        await _cancel_all(tasks)
        del tasks  # the results (inline bytes) must not ride on the cancellation's traceback
        raise
    failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
    if failed:
        await _cancel_all(tasks)
        error = failed[0].exception()
        # Raised from here, the error's traceback holds this frame; this frame must not hold
        # the error (through a task) or the cycle keeps every frame of the failed fetch
        # (its body, the request's sources) alive until the cyclic GC runs.
        del failed, tasks
        try:
            raise error
        finally:
            del error
    return [t.result() for t in tasks]


async def _cancel_all(tasks) -> None:
    for task in tasks:
        task.cancel()
    # Not gather(): its future would keep every result and error in a cycle with the error
    # being raised.
    await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved, so a second failure is not logged as unretrieved
