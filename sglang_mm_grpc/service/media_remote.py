"""The media store's shared tier: a Redis that every replica writes the media it keeps to
and reads the ids it lacks from (``serve --media-store-redis``), so a media id sent to one
replica resolves on all of them.

The local MediaStore stays the first tier; this one is asked only for ids the local one
misses, and written behind the request (a thread with a bounded queue: a full queue drops
and counts). Every key has the TTL, under ``sglang-mm:media:v1:{namespace}:``:

* ``b:{hash}``: the bytes (at most the local store's size, like the local store's items);
* ``h:{scope}:{hash}``: "1", the caller ``scope`` sent those bytes (not written, and not
  asked, when the store is shared);
* ``i:{scope}:{client id}``: the hash the caller bound the client id to.

``scope`` is the sha256 of the caller identity (32 hex digits). Nothing read is trusted:
bytes count only when their blake3 is the hash they are stored under and their size fits.
Redis down or slow costs a short timeout and then nothing at all for ``BACKOFF_S``: the
service answers from its local tier as it would without Redis.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import threading
import time
from collections import deque

from ..core.hashing import content_hash
from .media_store import is_hash_id

log = logging.getLogger(__name__)

KEY_PREFIX = "sglang-mm:media:v1:"
#: A namespace: the replicas sharing ids use the same one.
NAMESPACE = re.compile(r"[A-Za-z0-9._-]{1,64}")
DEFAULT_NAMESPACE = "default"
DEFAULT_TTL_S = 3600.0
#: Seconds a lookup (its round trips together) may take, by default.
TIMEOUT_S = 0.25
#: Seconds one write's socket operation may take (behind the request: a large video
#: may take longer than a lookup would be allowed to).
WRITE_TIMEOUT_S = 5.0
#: Seconds Redis is left alone after an error (no lookup waits for a dead server).
BACKOFF_S = 1.0
#: Writes waiting for the writer thread, by count and by bytes; past either, dropped.
QUEUE_ITEMS = 4096
QUEUE_BYTES = 256 << 20
#: Writes sent in one pipeline.
BATCH = 64
MISSING_CLIENT = ("serve --media-store-redis needs the redis package (redis-py): "
                  "pip install 'sglang-mm-grpc[media-redis]'")


def check_namespace(namespace: str) -> str:
    if NAMESPACE.fullmatch(namespace) is None:
        raise ValueError(f"media store namespace {namespace!r}: 1-64 of A-Z a-z 0-9 . _ -")
    return namespace


def load_client():
    """redis-py, imported only when the shared tier is used."""
    try:
        import redis
        import redis.asyncio
    except ImportError:
        raise RuntimeError(MISSING_CLIENT) from None
    return redis


def scope_key(scope: str) -> str:
    """A caller identity in a key: fixed length, so ``i:{scope}:{id}`` parses one way."""
    return hashlib.sha256(scope.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class RemoteMedia:
    """The Redis tier: ``put`` / ``bind`` queue writes, ``find`` looks ids up."""

    def __init__(self, url: str, *, max_item_bytes: int, shared: bool = False, namespace: str = DEFAULT_NAMESPACE,
                 ttl_s: float = DEFAULT_TTL_S, timeout_s: float = TIMEOUT_S):
        """``url``: redis:// or rediss://. ``max_item_bytes``: the largest item read or
        written (the local store's size). ``shared``: as the local store's."""
        self.redis = load_client()
        self.url, self.shared, self.timeout_s = url, shared, timeout_s
        self.max_item_bytes = int(max_item_bytes)
        self.ttl = max(1, int(round(ttl_s)))
        self.prefix = f"{KEY_PREFIX}{check_namespace(namespace)}:"
        writes = self._options(self.redis.retry, max(timeout_s, WRITE_TIMEOUT_S))
        self._sync = self.redis.Redis.from_url(url, **writes)
        self._aio = None  # made on the event loop, at its first lookup
        self._queue: deque = deque()
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._closed = False
        self._down_until = 0.0
        self.hits = self.misses = self.errors = self.invalid = self.written = self.dropped = 0
        self._writer = threading.Thread(target=self._write_loop, name="mm-media-redis", daemon=True)
        self._writer.start()

    def _options(self, retry_module, timeout_s: float) -> dict:
        """Short timeouts; one retry, which a connection a Redis restart broke needs."""
        from redis.backoff import NoBackoff

        return {"socket_timeout": timeout_s, "socket_connect_timeout": self.timeout_s,
                "retry": retry_module.Retry(NoBackoff(), 1)}

    def counts(self) -> dict:
        return {"remote_hits": self.hits, "remote_misses": self.misses, "remote_errors": self.errors,
                "remote_invalid": self.invalid, "remote_written": self.written, "remote_dropped": self.dropped}

    # -- writes: behind the request, in the writer thread -------------------------------

    def put(self, digest: str, data: bytes, scope: str) -> None:
        """Queue ``data`` under ``digest`` for ``scope`` (never blocks; dropped when full)."""
        if 0 < len(data) <= self.max_item_bytes:
            self._enqueue(("put", digest, data, scope_key(scope)), len(data))

    def bind(self, scope: str, client_id: str, digest: str) -> None:
        self._enqueue(("bind", digest, client_id, scope_key(scope)), 0)

    def _enqueue(self, item: tuple, size: int) -> None:
        with self._cond:
            if self._closed or len(self._queue) >= QUEUE_ITEMS or self._queued_bytes + size > QUEUE_BYTES:
                self.dropped += 1
                return
            self._queue.append((item, size))
            self._queued_bytes += size
            self._cond.notify()

    def _take(self) -> list | None:
        """Up to BATCH queued writes (waiting for one); None once closed and empty."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            batch: list = []
            while self._queue and len(batch) < BATCH:
                item, size = self._queue.popleft()
                self._queued_bytes -= size
                batch.append(item)
            return batch or None

    def _write_loop(self) -> None:
        while (batch := self._take()) is not None:
            if time.monotonic() < self._down_until:
                self._count("dropped", len(batch))
                continue
            try:
                self._write(batch)
                self._count("written", len(batch))
            except Exception as e:  # Redis down, slow or refusing: the request is long answered
                self._failed(e, "write")
                self._count("dropped", len(batch))

    def _count(self, name: str, n: int) -> None:
        with self._cond:
            setattr(self, name, getattr(self, name) + n)

    def _write(self, batch: list) -> None:
        """Refresh the TTL of bytes Redis holds; send only the bytes it lacks; then the
        holders and bindings (small)."""
        puts = {digest: data for kind, digest, data, _ in batch if kind == "put"}
        order = list(puts)
        pipe = self._sync.pipeline(transaction=False)
        for digest in order:
            pipe.expire(self.prefix + "b:" + digest, self.ttl)
        held = pipe.execute() if order else []
        pipe = self._sync.pipeline(transaction=False)
        for digest, there in zip(order, held):
            if not there:
                pipe.set(self.prefix + "b:" + digest, puts[digest], ex=self.ttl)
        for kind, digest, what, scope in batch:
            if kind == "put" and not self.shared:
                pipe.set(f"{self.prefix}h:{scope}:{digest}", b"1", ex=self.ttl)
            elif kind == "bind":
                pipe.set(f"{self.prefix}i:{scope}:{what}", digest, ex=self.ttl)
        pipe.execute()

    def _failed(self, e: BaseException, what: str) -> None:
        """Count it and leave Redis alone for BACKOFF_S (logged once per outage)."""
        self._count("errors", 1)
        if time.monotonic() >= self._down_until + BACKOFF_S:
            log.warning("media store redis %s failed (%s: %s); serving from the local store alone for %.0fs",
                        what, type(e).__name__, e, BACKOFF_S)
        self._down_until = time.monotonic() + BACKOFF_S

    # -- reads: on the event loop, within the request's deadline ------------------------

    async def find(self, scope: str, wanted: list[tuple[str | None, str | None]],
                   deadline: float | None) -> list[tuple[str, bytes] | None]:
        """For each (hash or None, client id or None) the caller ``scope`` asks for: its
        (hash, bytes) from Redis, or None (not there, not this caller's, not intact, or
        Redis unreachable within TIMEOUT_S and the deadline)."""
        none: list[tuple[str, bytes] | None] = [None] * len(wanted)
        budget = self.timeout_s if deadline is None else min(self.timeout_s, deadline - time.monotonic())
        if time.monotonic() < self._down_until or budget <= 0:
            self._count("errors", 1)
            return none
        try:
            found = await asyncio.wait_for(self._lookup(scope_key(scope), wanted), budget)
        except asyncio.TimeoutError as e:
            if budget < self.timeout_s:  # the request's deadline, not Redis: no backoff for the others
                self._count("errors", 1)
            else:
                self._failed(e, "lookup")
            return none
        except Exception as e:  # Redis down, refusing, or answering what no replica wrote: a miss
            self._failed(e, "lookup")
            return none
        answers = await asyncio.to_thread(self._verified, found) if any(found) else none
        hits = sum(a is not None for a in answers)
        self._count("hits", hits)
        self._count("misses", len(wanted) - hits)
        return answers

    async def _lookup(self, scope: str, wanted: list) -> list:
        """The client ids' hashes (one round trip, when any is asked), which of the hashes
        this caller sent (one more, unless the store is shared), then those hashes' bytes:
        no bytes cross for a caller that may not have them."""
        client = self._client()
        digests = [digest for digest, _ in wanted]
        unbound = [k for k, (digest, cid) in enumerate(wanted) if digest is None and cid is not None]
        if unbound:
            pipe = client.pipeline(transaction=False)
            for k in unbound:
                pipe.get(f"{self.prefix}i:{scope}:{wanted[k][1]}")
            for k, bound in zip(unbound, await pipe.execute()):
                text = bound.decode("ascii", "replace") if isinstance(bound, bytes) else ""
                digests[k] = text if is_hash_id(text) else None
        asked = [k for k, digest in enumerate(digests) if digest is not None]
        if asked and not self.shared:
            pipe = client.pipeline(transaction=False)
            for k in asked:
                pipe.exists(f"{self.prefix}h:{scope}:{digests[k]}")
            asked = [k for k, held in zip(asked, await pipe.execute()) if held]
        found: list = [None] * len(wanted)
        if not asked:
            return found
        pipe = client.pipeline(transaction=False)
        for k in asked:
            pipe.get(self.prefix + "b:" + digests[k])
        for k, data in zip(asked, await pipe.execute()):
            if isinstance(data, bytes) and data:
                found[k] = (digests[k], data)
        return found

    def _verified(self, found: list) -> list:
        """Only bytes whose blake3 is their key's hash (and that fit) count; the rest are
        counted as invalid and treated as missing."""
        out: list = []
        for entry in found:
            if entry is not None and (len(entry[1]) > self.max_item_bytes or content_hash(entry[1]) != entry[0]):
                self._count("invalid", 1)
                log.warning("media store redis: bytes under %s... are not theirs; ignored", entry[0][:16])
                entry = None
            out.append(entry)
        return out

    def _client(self):
        if self._aio is None:
            self._aio = self.redis.asyncio.Redis.from_url(self.url, **self._options(self.redis.asyncio.retry,
                                                                                    self.timeout_s))
        return self._aio

    async def aclose(self) -> None:
        """Stop the writer once the queue is written (or its writes fail); close both clients."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        await asyncio.to_thread(self._writer.join, 5)
        self._sync.close()
        if self._aio is not None:
            await self._aio.aclose()
