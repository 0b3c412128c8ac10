"""The preprocessing cache: a repeated image or video skips decode and pixel work.

Chat clients resend every earlier image on each turn, so the same bytes come back for
the same model again and again. Entries are keyed by (blake3 of the encoded bytes,
the resolved spec of the family that processed them: the model's, or the variant a
request's image options configured), so anything that changes the output changes the key.
A video is keyed the same way, its spec part also naming the video processor its
options configured (sampling, pixel bounds), so another fps is another entry; an audio
clip likewise with the feature extractor its options configured (truncation), so a
repeated clip skips decode, resampling and features.
Bounded in bytes with LRU eviction; thread-safe. Cached arrays are read-only and may
be handed out as is (a single-image request returns the cached tensor itself).

An entry that would cost a copy the call does not otherwise make (an image the kernels
wrote into a shared-memory segment a worker reads and removes) is kept only from its
second miss on (``missed_before``): a copy into fresh pages cost 0.7 ms for a 5.6 MB
uint8 tensor and 13 ms for a 22.5 MB float32 one here, paid by every never-repeated image.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic

import numpy as np

from ..core.carriers import AudioMeta
from ..families import ItemPlan
from ..families.audio import AudioPlan
from ..families.batching import Slot
from ..families.video import VP, VideoProcessor


class _Held:
    """An entry's size: the bytes of the arrays it keeps."""

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays))


@dataclass(frozen=True)
class CachedItem(_Held):
    """One image's outputs, laid out as a single-image batch (``pixel_values[slot]`` is
    the item's features) so a one-image request can reuse the arrays without a copy."""

    height: int
    width: int
    plan: ItemPlan[Any]
    pixel_values: np.ndarray
    slot: Slot
    aux: dict[str, np.ndarray]

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.pixel_values, *self.aux.values()


@dataclass(frozen=True)
class CachedVideo(_Held, Generic[VP]):
    """One video's outputs: its plan (sampling, size, expansion), its rows of
    pixel_values_videos and its video tensors, and the rotation its frames carried."""

    plan: VP  # the family's plan of the video (``VideoFamily.plan_video``)
    pixel_values: np.ndarray
    aux: dict[str, np.ndarray]
    rotation: int = 0

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.pixel_values, *self.aux.values()


@dataclass(frozen=True)
class CachedAudio(_Held):
    """One clip's outputs: its container's facts, its plan (samples, frames, expansion)
    and its tensors (``AudioFamily.process_audio``'s, its rows only)."""

    meta: AudioMeta
    plan: AudioPlan
    aux: dict[str, np.ndarray]

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(self.aux.values())


#: What the cache holds: an image's, a video's or a clip's outputs.
Cached = CachedItem | CachedVideo[Any] | CachedAudio


def video_key(content_hash: str, spec_key: str, config: VideoProcessor) -> tuple[str, str]:
    """A video's cache key: its bytes, the model's spec and the effective video processor
    (a frozen dataclass: its repr holds every knob, the sampling options included)."""
    return content_hash, f"video:{spec_key}:{config!r}"


def audio_key(content_hash: str, spec_key: str, config: object) -> tuple[str, str]:
    """A clip's cache key: its bytes, the model's spec and the effective feature extractor
    (the family's frozen dataclass: its repr holds every knob, truncation included)."""
    return content_hash, f"audio:{spec_key}:{config!r}"


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    items: int = 0
    bytes: int = 0
    max_bytes: int = 0
    too_large: int = 0
    peak_bytes: int = 0  # the most ever held at once (never above max_bytes)


#: How many missed keys the cache remembers (``missed_before``): ~200 bytes each.
MISSES_REMEMBERED = 16384


class PreprocessCache:
    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], Cached] = OrderedDict()
        self._missed: OrderedDict[tuple[str, str], int] = OrderedDict()  # key -> its misses (the latest last)
        self._bytes = 0
        self._stats = CacheStats(max_bytes=self.max_bytes)

    def get(self, key: tuple[str, str]) -> Cached | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._stats.misses += 1
                self._missed[key] = self._missed.pop(key, 0) + 1
                if len(self._missed) > MISSES_REMEMBERED:
                    self._missed.popitem(last=False)
                return None
            self._entries.move_to_end(key)
            self._stats.hits += 1
            return entry

    def peek(self, key: tuple[str, str]) -> Cached | None:
        """The entry if held, without counting a hit or miss or refreshing its recency
        (a plan asks whether a Preprocess would hit; it uses nothing)."""
        with self._lock:
            return self._entries.get(key)

    def missed_before(self, key: tuple[str, str]) -> bool:
        """Whether ``key`` missed before its latest miss (of the last ``MISSES_REMEMBERED``
        keys that missed): seen again, so worth a copy."""
        with self._lock:
            return self._missed.get(key, 0) > 1

    def admits(self, nbytes: int) -> bool:
        """Whether an entry of ``nbytes`` can be held at all (counted as too large if
        not), asked before making a copy only the cache would keep."""
        if nbytes <= self.max_bytes:
            return True
        with self._lock:
            self._stats.too_large += 1
        return False

    def put(self, key: tuple[str, str], item: Cached) -> None:
        """Keep ``item`` (its arrays made read-only: they may be the caller's own output),
        evicting the least recently used; an item larger than the cache is only counted."""
        nbytes = item.nbytes
        if not self.admits(nbytes):
            return
        for a in item.arrays:
            a.flags.writeable = False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            while self._entries and self._bytes + nbytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes
                self._stats.evictions += 1
            self._entries[key] = item
            self._missed.pop(key, None)
            self._bytes += nbytes
            self._stats.peak_bytes = max(self._stats.peak_bytes, self._bytes)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._missed.clear()
            self._bytes = 0

    @property
    def stats(self) -> CacheStats:
        with self._lock:
            s = self._stats
            return CacheStats(
                s.hits, s.misses, s.evictions, len(self._entries), self._bytes, self.max_bytes, s.too_large,
                peak_bytes=s.peak_bytes,
            )
