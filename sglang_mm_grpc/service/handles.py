"""The handle store: what Preprocess keeps for Assemble, bounded so it cannot eat the host.

Bounded in total bytes and in count, every entry expires ``ttl_s`` after its last use,
and the least recently used entries go first when a new one needs room. Thread-safe
(one lock; every operation is O(1) apart from eviction, which is amortised).
A short memory of handles that left the store says why a lookup missed, so a caller
is told "expired" or "evicted" instead of just "unknown". ``on_drop(value, why)`` hears
of every entry the store itself drops (expired or evicted; ``pop`` returns the value to
its caller instead), after the lock is released. With an ``owner`` (``owners.py``)
every handle ends with ``@owner``, so any process can tell whose it is.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

V = TypeVar("V")

# Why a handle is no longer (or never was) in the store.
EXPIRED, EVICTED, RELEASED, UNKNOWN = "expired", "evicted", "released", "unknown"


class TooLarge(ValueError):
    """One entry bigger than the whole store."""


@dataclass
class _Entry(Generic[V]):
    value: V
    nbytes: int
    expires: float


@dataclass(frozen=True)
class StoreStats:
    items: int
    bytes: int
    max_items: int
    max_bytes: int
    evicted: int
    expired: int
    peak_bytes: int = 0  # the most ever held at once (never above max_bytes)


class HandleStore(Generic[V]):
    def __init__(
        self,
        max_bytes: int,
        max_items: int,
        ttl_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        remember: int = 4096,
        on_drop: Callable[[V, str], None] | None = None,
        owner: str = "",
    ):
        if max_bytes <= 0 or max_items <= 0 or ttl_s <= 0:
            raise ValueError("max_bytes, max_items and ttl_s must be positive")
        self.max_bytes = int(max_bytes)
        self.max_items = int(max_items)
        self.ttl_s = float(ttl_s)
        self._clock = clock
        self._suffix = f"@{owner}" if owner else ""
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry[V]] = OrderedDict()  # oldest use first
        self._bytes = 0
        self._gone: OrderedDict[str, str] = OrderedDict()  # handle -> why, bounded
        self._remember = remember
        self._evicted = 0
        self._expired = 0
        self._peak = 0
        self._on_drop = on_drop
        self._dropped: list[tuple[V, str]] = []  # under the lock; reported after it

    def set_owner(self, owner: str) -> None:
        """Name ``owner`` in the handles made from now on (known once the port is bound)."""
        self._suffix = f"@{owner}" if owner else ""

    def put(self, value: V, nbytes: int) -> str:
        """Keep ``value`` (accounted as ``nbytes``); returns its new handle."""
        nbytes = int(nbytes)
        if nbytes > self.max_bytes:
            raise TooLarge(f"{nbytes} bytes exceed the handle store's capacity of {self.max_bytes} bytes")
        handle = secrets.token_hex(16) + self._suffix
        with self._lock:
            now = self._clock()
            self._expire(now)
            while self._entries and (
                len(self._entries) >= self.max_items or self._bytes + nbytes > self.max_bytes
            ):
                old, entry = self._entries.popitem(last=False)
                self._bytes -= entry.nbytes
                self._evicted += 1
                self._forget(old, EVICTED)
                self._dropped.append((entry.value, EVICTED))
            self._entries[handle] = _Entry(value, nbytes, now + self.ttl_s)
            self._bytes += nbytes
            self._peak = max(self._peak, self._bytes)
        self._report()
        return handle

    def get(self, handle: str) -> V | None:
        """The value, or None when the handle is unknown or gone. A hit refreshes TTL and recency."""
        with self._lock:
            now = self._clock()
            entry = self._entries.get(handle)
            if entry is None:
                return None
            if entry.expires <= now:
                self._drop(handle, EXPIRED)
                self._dropped.append((entry.value, EXPIRED))
                entry = None
            else:
                entry.expires = now + self.ttl_s
                self._entries.move_to_end(handle)
        self._report()
        return None if entry is None else entry.value

    def pop(self, handle: str) -> V | None:
        """Remove and return the value (None when unknown or gone)."""
        with self._lock:
            entry = self._entries.get(handle)
            if entry is None:
                return None
            expired = entry.expires <= self._clock()
            self._drop(handle, EXPIRED if expired else RELEASED)
            if expired:
                self._dropped.append((entry.value, EXPIRED))
        self._report()
        return None if expired else entry.value

    def why_missing(self, handle: str) -> str:
        """expired | evicted | released | unknown (for a handle that ``get`` missed)."""
        with self._lock:
            return self._gone.get(handle, UNKNOWN)

    def sweep(self) -> int:
        """Drop every expired entry now; returns how many went."""
        with self._lock:
            n = self._expire(self._clock())
        self._report()
        return n

    def stats(self) -> StoreStats:
        with self._lock:
            return StoreStats(
                len(self._entries), self._bytes, self.max_items, self.max_bytes, self._evicted, self._expired, self._peak
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # -- under the lock ------------------------------------------------------------------

    def _drop(self, handle: str, why: str) -> None:
        entry = self._entries.pop(handle)
        self._bytes -= entry.nbytes
        if why == EXPIRED:
            self._expired += 1
        self._forget(handle, why)

    def _expire(self, now: float) -> int:
        # Entries are in recency order and every use extends by the same TTL, so
        # expiry order equals recency order: stop at the first live one.
        n = 0
        while self._entries:
            handle, entry = next(iter(self._entries.items()))
            if entry.expires > now:
                break
            self._drop(handle, EXPIRED)
            self._dropped.append((entry.value, EXPIRED))
            n += 1
        return n

    def _report(self) -> None:
        """Tell ``on_drop`` of what left under the lock (outside it)."""
        if not self._dropped:
            return
        with self._lock:
            dropped, self._dropped = self._dropped, []
        if self._on_drop is not None:
            for value, why in dropped:
                self._on_drop(value, why)

    def _forget(self, handle: str, why: str) -> None:
        self._gone[handle] = why
        while len(self._gone) > self._remember:
            self._gone.popitem(last=False)
