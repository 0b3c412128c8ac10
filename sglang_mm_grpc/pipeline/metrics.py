"""Service counters, stage latency histograms and the per-request log line, in one place.

The hot path only adds to plain integers under one lock; nothing here imports
prometheus_client (``exporter.py`` renders a snapshot when scraped). The counters of
the other parts (fetcher, cache, handle store, driver work) stay where they are kept
and are read into the same ``Snapshot`` on demand.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from ..core.errors import Code, PreprocessError
from .cache import CacheStats

#: Stages every request log line and histogram reports, in order. ``queue`` is time
#: spent waiting for a worker; decode is summed over images (they run in parallel).
STAGES = ("fetch", "queue", "decode", "process", "layout", "assemble", "total")
#: Per successful Preprocess with videos: decoding their sampled frames, and resizing,
#: normalizing and patchifying them (each summed over the call's videos).
VIDEO_STAGES = ("video_decode", "video_process")
#: Histogram upper bounds (ms); one more bucket holds everything slower.
BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0)

request_log = logging.getLogger("sglang_mm_grpc.requests")

_CLIP = 128  # characters of a client-given string (request id, model) in the log


class WorkCounters:
    """Per-image steps run or skipped by cancellation, and images decoded (updated from
    worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.run = 0
        self.skipped = 0
        self.decoded = 0

    def add(self, *, run: int = 0, skipped: int = 0, decoded: int = 0) -> None:
        with self._lock:
            self.run += run
            self.skipped += skipped
            self.decoded += decoded


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))
    count: int = 0
    sum_ms: float = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS_MS, ms)] += 1
        self.count += 1
        self.sum_ms += ms

    def copy(self) -> "Histogram":
        return Histogram(list(self.counts), self.count, self.sum_ms)


@dataclass
class RequestRecord:
    """What one RPC did; filled in by the handler as it goes, logged once at the end."""

    method: str
    request_id: str = ""
    model: str = ""
    backend: str = ""
    images: int = 0
    bytes: int = 0
    handle: str = ""
    stages_ms: dict[str, float] = field(default_factory=dict)
    t0: float = field(default_factory=time.perf_counter)
    videos: int = 0
    video_bytes: int = 0
    video_frames: int = 0  # sampled and decoded into pixels, in a successful Preprocess
    videos_cached: int = 0  # answered from the preprocessing cache (nothing decoded)
    video_ms: dict[str, float] = field(default_factory=dict)  # VIDEO_STAGES
    video_refusal: str = ""  # why a call with videos failed because of one (``video_refusal_cause``)


@dataclass
class VideoCounts:
    """Video counters since start (``GetStatsResponse.video``)."""

    videos: int = 0  # in successful Preprocess calls
    video_bytes: int = 0
    frames: int = 0  # sampled from them and decoded into pixel_values_videos
    planned: int = 0  # in successful Plan calls
    refusals: dict[str, int] = field(default_factory=dict)
    stages: dict[str, Histogram] = field(default_factory=lambda: {s: Histogram() for s in VIDEO_STAGES})
    cached: int = 0  # of ``videos``: from the preprocessing cache

    def copy(self) -> "VideoCounts":
        return VideoCounts(self.videos, self.video_bytes, self.frames, self.planned, dict(self.refusals),
                           {k: h.copy() for k, h in self.stages.items()}, self.cached)


class StoreCounts(Protocol):
    """What a snapshot reads of the handle store's counters (the service's ``StoreStats``)."""

    @property
    def items(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def max_items(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def evicted(self) -> int: ...
    @property
    def expired(self) -> int: ...
    @property
    def peak_bytes(self) -> int: ...


class MediaCounts(Protocol):
    """What a snapshot reads of the media store's counters (the service's ``MediaStats``)."""

    @property
    def items(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def stored(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def bound_ids(self) -> int: ...
    @property
    def peak_bytes(self) -> int: ...
    @property
    def remote_hits(self) -> int: ...
    @property
    def remote_misses(self) -> int: ...
    @property
    def remote_errors(self) -> int: ...
    @property
    def remote_invalid(self) -> int: ...
    @property
    def remote_written(self) -> int: ...
    @property
    def remote_dropped(self) -> int: ...


@dataclass
class Snapshot:
    """Every counter at one moment (the GetStats reply and the Prometheus scrape)."""

    uptime_s: float
    in_flight: int
    max_in_flight: int
    rejected_busy: int
    requests: dict[str, int]
    statuses: dict[tuple[str, str], int]
    images: int
    image_bytes: int
    stages: dict[str, Histogram]
    fetch: dict = field(default_factory=dict)
    cache: CacheStats | None = None
    store: StoreCounts | None = None
    media: MediaCounts | None = None
    work_busy: int = 0
    image_steps: int = 0
    image_steps_skipped: int = 0
    images_decoded: int = 0
    video: VideoCounts = field(default_factory=VideoCounts)


class Metrics:
    """Request counters: by method, by final status, images and bytes, stage latencies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self._requests: Counter[str] = Counter()
        self._statuses: Counter[tuple[str, str]] = Counter()
        self._images = 0
        self._image_bytes = 0
        self._stages = {s: Histogram() for s in STAGES}
        self._video = VideoCounts()

    def started_call(self, method: str) -> None:
        with self._lock:
            self._requests[method] += 1

    def finish(self, rec: RequestRecord, code: str, message: str = "") -> None:
        """Count the call's outcome and write its one log line."""
        total = (time.perf_counter() - rec.t0) * 1e3
        rec.stages_ms["total"] = total
        with self._lock:
            self._statuses[(rec.method, code)] += 1
            if code == "OK":
                if rec.method == "Preprocess":
                    self._images += rec.images
                    self._image_bytes += rec.bytes
                for stage, ms in rec.stages_ms.items():
                    self._stages[stage].observe(ms)
            if rec.videos:
                self._count_videos(rec, code)
        if request_log.isEnabledFor(logging.INFO):
            request_log.info("%s", log_line(rec, code, message))

    def _count_videos(self, rec: RequestRecord, code: str) -> None:
        """A call with videos (under the lock): what it preprocessed, or why it failed."""
        v = self._video
        if code != "OK":
            if rec.video_refusal:
                v.refusals[rec.video_refusal] = v.refusals.get(rec.video_refusal, 0) + 1
        elif rec.method == "Plan":
            v.planned += rec.videos
        elif rec.method == "Preprocess":
            v.videos += rec.videos
            v.video_bytes += rec.video_bytes
            v.frames += rec.video_frames
            v.cached += rec.videos_cached
            for stage, ms in rec.video_ms.items():
                v.stages[stage].observe(ms)

    def snapshot(self, **parts) -> Snapshot:
        with self._lock:
            return Snapshot(
                uptime_s=time.monotonic() - self.started,
                requests=dict(self._requests),
                statuses=dict(self._statuses),
                images=self._images,
                image_bytes=self._image_bytes,
                stages={s: h.copy() for s, h in self._stages.items()},
                video=self._video.copy(),
                **parts,
            )


def log_line(rec: RequestRecord, code: str, message: str = "") -> str:
    """One JSON object: id, method, model, images, bytes, per-stage ms, status."""
    entry = {
        "event": "request",
        "method": rec.method,
        "request_id": rec.request_id[:_CLIP],
        "model": rec.model[:_CLIP],
        "images": rec.images,
        "bytes": rec.bytes,
        "ms": {s: round(rec.stages_ms[s], 3) for s in STAGES if s in rec.stages_ms},
        "status": code,
    }
    if rec.videos:
        entry["videos"] = rec.videos
        entry["video_bytes"] = rec.video_bytes
        if rec.video_ms:
            entry["video_ms"] = {s: round(ms, 3) for s, ms in rec.video_ms.items()}
    if rec.backend:
        entry["backend"] = rec.backend
    if rec.handle:
        entry["handle"] = rec.handle[:8]  # a prefix: a whole handle lets anyone assemble it
    if message:
        entry["error"] = message[:512]
    return json.dumps(entry, separators=(",", ":"))


#: RESOURCE_EXHAUSTED causes, as the video limits' errors name them (the first found wins).
_VIDEO_LIMITS = (("tokens per video", "max_tokens"), ("max_videos", "max_videos"), ("video_max_bytes", "max_bytes"),
                 ("(max_bytes)", "max_bytes"), ("max_duration_s", "max_duration_s"),
                 ("max_sampled_frames", "max_sampled_frames"), ("max_decoded_frames", "max_decoded_frames"),
                 ("max_frame_pixels", "max_frame_pixels"))


def video_refusal_cause(e: PreprocessError) -> str:
    """Why a call with videos failed, when a video (or the request's videos) made it fail:
    the limit's name (max_videos, max_bytes, max_duration_s, max_decoded_frames,
    max_sampled_frames, max_frame_pixels, max_tokens), decode_timeout, invalid (a
    corrupt or unreadable video, refused options, placeholders), no_pyav, model (takes no
    video), backend (SGLang, TensorRT-LLM), else the status code in lower case; "" when
    the failure is not about a video (an image's, the server's, a media id not held)."""
    message = e.message
    if e.kind != "video" and "video" not in message:
        return ""
    if e.code is Code.RESOURCE_EXHAUSTED:
        return next((cause for needle, cause in _VIDEO_LIMITS if needle in message), "resource_exhausted")
    if e.code is Code.DEADLINE_EXCEEDED and e.kind == "video":
        return "decode_timeout"
    if e.code is Code.INVALID_ARGUMENT:
        return "invalid"
    if e.code is Code.FAILED_PRECONDITION:
        if "`video` extra" in message:
            return "no_pyav"
        return "backend" if "cannot take this request" in message else "model"
    if e.code is Code.NOT_FOUND:
        return ""  # media ids not held: GetStats.media counts them
    return e.code.value.lower()
