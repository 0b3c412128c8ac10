"""Video bytes -> the sampled frames, uint8 RGB, as HF's PyAV loader gives them.

transformers' ``load_video(backend="pyav")`` (``read_video_pyav``) takes its metadata
from the container header (``stream.frames``, ``stream.average_rate``, the codec
context's size) and numbers frames in the order the decoder returns them, converting
each kept frame with ``to_ndarray(format="rgb24")``; no rotation is applied. This module
does the same, but keeps only the frames sampling asked for (never the whole video) and
converts only those, and stops after the last one.

Every limit (``VideoLimits``) is checked as early as it can be: the byte size before
opening, the header's claims (frame size, frame count, duration) before any frame is
decoded, then while decoding the real number of packets and frames and the time spent
(checked between packets, against the limit and the request's remaining deadline).

``av`` (PyAV, FFmpeg inside its wheel) is the ``video`` extra: it is imported on first
use, so the package imports without it and a video then gets FAILED_PRECONDITION.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import time
from dataclasses import dataclass
from typing import Generator, Sequence

import numpy as np

from ..core.carriers import VideoMeta
from ..core.errors import Code, PreprocessError
from . import video_index

INSTALL_HINT = ("video needs the `video` extra: pip install 'sglang-mm-grpc[video]' "
                "(./scripts/serve and ./scripts/test install it)")


@dataclass(frozen=True)
class VideoLimits:
    """What one video may cost; each is named in its RESOURCE_EXHAUSTED error."""

    max_bytes: int = 256 << 20
    max_duration_s: float = 3600.0
    max_decoded_frames: int = 10000  # frames decoded (HF decodes every frame up to the last sampled one)
    max_sampled_frames: int = 768
    max_frame_pixels: int = 8294400  # 3840 x 2160
    decode_timeout_s: float = 30.0

    @property
    def max_packets(self) -> int:
        """Packets read before the decoder must have produced its frames: a stream of
        empty or tiny packets is cut off here rather than read to its end."""
        return 4 * self.max_decoded_frames + 1024


#: The decoder's thread_type when ``frames`` is not given one: None keeps PyAV's default
#: (SLICE threads, FFmpeg's count), which is what HF's loader decodes with.
THREADS: str | None = None


@functools.lru_cache(maxsize=1)
def video_available() -> bool:
    """Whether PyAV is installed (the ``video`` extra)."""
    return importlib.util.find_spec("av") is not None


def _av():
    if not video_available():
        raise PreprocessError(Code.FAILED_PRECONDITION, INSTALL_HINT)
    import av  # noqa: PLC0415  (lazy: the extra is optional)

    return av


def _exhausted(what: str, value, limit, name: str, item: int | None) -> PreprocessError:
    return PreprocessError(Code.RESOURCE_EXHAUSTED, f"{what} {value}, over the limit of {limit} ({name})",
                           item=item, kind="video")


def _bad(message: str, item: int | None) -> PreprocessError:
    return PreprocessError(Code.INVALID_ARGUMENT, message, item=item, kind="video")


def _open(av, data: bytes, item: int | None):
    try:
        return av.open(io.BytesIO(data), mode="r")
    except av.FFmpegError as e:
        raise _bad(f"not a readable video container ({_why(e)})", item) from None
    except (ValueError, OSError) as e:
        raise _bad(f"not a readable video container ({e})", item) from None


def _why(e: Exception) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def probe(data: bytes, limits: VideoLimits = VideoLimits(), item: int | None = None) -> VideoMeta:
    """The header's facts, held to the limits; nothing decoded."""
    av = _av()
    if len(data) > limits.max_bytes:
        raise _exhausted("video of", f"{len(data)} bytes", limits.max_bytes, "max_bytes", item)
    with _open(av, data, item) as container:
        return _meta(container, limits, item)


def check_limits(meta: VideoMeta, size: int, limits: VideoLimits, item: int | None = None) -> None:
    """A video known from before (its header probed under some limits) held to these."""
    if size > limits.max_bytes:
        raise _exhausted("video of", f"{size} bytes", limits.max_bytes, "max_bytes", item)
    if meta.width * meta.height > limits.max_frame_pixels:
        raise _exhausted("frames of", f"{meta.width}x{meta.height} = {meta.width * meta.height} pixels",
                         limits.max_frame_pixels, "max_frame_pixels", item)
    if meta.total_num_frames > limits.max_decoded_frames:
        raise _exhausted("the header claims", f"{meta.total_num_frames} frames", limits.max_decoded_frames,
                         "max_decoded_frames", item)
    for claimed in (meta.duration_s, meta.container_duration_s):
        if claimed is not None and claimed > limits.max_duration_s:
            raise _exhausted("a duration of", f"{claimed:.1f} s", f"{limits.max_duration_s:g} s", "max_duration_s",
                             item)


def _meta(container, limits: VideoLimits, item: int | None) -> VideoMeta:
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["no streams"]
        raise _bad(f"the container has no video stream ({', '.join(kinds)})", item)
    stream = container.streams.video[0]
    width, height = int(stream.width or 0), int(stream.height or 0)
    if width <= 0 or height <= 0:
        raise _bad(f"the video stream has no frame size ({width}x{height})", item)
    if width * height > limits.max_frame_pixels:
        raise _exhausted("frames of", f"{width}x{height} = {width * height} pixels", limits.max_frame_pixels,
                         "max_frame_pixels", item)
    total = int(stream.frames or 0)
    if total > limits.max_decoded_frames:
        raise _exhausted("the header claims", f"{total} frames", limits.max_decoded_frames, "max_decoded_frames",
                         item)
    rate = stream.average_rate
    fps = float(rate) if rate else 0.0
    if not fps > 0 or fps != fps:
        raise _bad("the video stream has no frame rate (average rate 0 or unknown)", item)
    if total <= 0:
        raise _bad("the container does not say how many frames the video stream has (HF's PyAV loader reads "
                   "the count from the header)", item)
    duration = total / fps
    container_s = container.duration / 1e6 if container.duration and container.duration > 0 else None
    for claimed in (duration, container_s):
        if claimed is not None and claimed > limits.max_duration_s:
            raise _exhausted("a duration of", f"{claimed:.1f} s", f"{limits.max_duration_s:g} s", "max_duration_s",
                             item)
    return VideoMeta(total, fps, duration, height, width, _rotation(stream), stream.codec_context.name or "",
                     container_s)


def _rotation(stream) -> int:
    """The rotate tag older muxers write (newer ones carry a display matrix, read from
    the first decoded frame); reported only: HF's frames are not rotated."""
    try:
        return int(float(stream.metadata.get("rotate", 0))) % 360
    except (TypeError, ValueError):
        return 0


def frames(data: bytes, indices: Sequence[int], meta: VideoMeta, limits: VideoLimits = VideoLimits(),
           item: int | None = None, deadline: float | None = None, rotation: list | None = None,
           threads: str | None = None, sequential: bool = False, stats: dict | None = None,
           skip_nonref: bool = True) -> Generator[np.ndarray, None, None]:
    """uint8 [H, W, 3] for each of ``indices`` (ascending; repeats yield the same frame
    again), numbered as ``read_video_pyav`` numbers them. ``deadline``: a
    ``time.monotonic()`` value the decode must end by (with ``limits.decode_timeout_s``,
    the earlier wins). ``rotation``: a list the first frame's rotation is appended to.
    ``threads``: the decoder's thread_type (None: ``THREADS``).
    ``sequential``: decode every frame in order even where the stream is indexed.
    ``skip_nonref`` False: decode the frames not needed that nothing references too.
    ``stats``: a dict given ``path`` ("indexed" or "sequential"), ``decoded`` (frames the
    decoder returned) and ``fed`` (packets given to the decoder) as decoding goes."""
    av = _av()
    if len(indices) > limits.max_sampled_frames:
        raise _exhausted("sampling takes", f"{len(indices)} frames", limits.max_sampled_frames,
                         "max_sampled_frames", item)
    if not len(indices):
        return
    job = _Job(av, data, np.asarray(indices, dtype=np.int64), meta, limits, item, deadline, threads or THREADS,
               stats if stats is not None else {})
    job.skip = "NONREF" if skip_nonref else "DEFAULT"
    k = 0  # next position in ``job.wanted``
    for i, frame in job.picked(sequential):
        if rotation is not None and not rotation:
            rotation.append(int(getattr(frame, "rotation", 0) or 0) % 360)
        rgb = _rgb(frame, meta, item)
        while k < len(job.wanted) and job.wanted[k] == i:
            held = time.monotonic()
            yield rgb
            job.counter.extend(time.monotonic() - held)  # the caller's time is not decoding
            k += 1
    if k < len(job.wanted):
        raise _bad(f"the video stream ends after fewer frames than its header claims ({meta.total_num_frames}); "
                   f"frame {int(job.wanted[k])} is missing", item)


class _Job:
    """One video's decode of its sampled frames: the packet index when the stream has one
    (only the runs of packets those frames need, frames not needed skipped where nothing
    references them), else every frame in order; the limits counted across both passes."""

    def __init__(self, av, data, wanted, meta, limits, item, deadline, threads, stats):
        self.av, self.data, self.wanted, self.meta, self.limits = av, data, wanted, meta, limits
        self.item, self.deadline, self.threads, self.stats = item, deadline, threads, stats
        self.decoded = 0
        self.skip = "NONREF"
        self.counter = video_index.Counter(limits.max_packets, limits.decode_timeout_s, deadline,
                                           self._too_many_packets, self._late)

    def _too_many_packets(self) -> PreprocessError:
        n = self.limits.max_packets
        return _exhausted("the stream holds over", f"{n} packets", n, "4 x max_decoded_frames + 1024 packets",
                          self.item)

    def _late(self) -> PreprocessError:
        late_for_request = self.deadline is not None and time.monotonic() > self.deadline
        what = "the request's deadline" if late_for_request else f"decode_timeout_s {self.limits.decode_timeout_s:g} s"
        return PreprocessError(Code.DEADLINE_EXCEEDED, f"decoding took longer than its budget ({what}) "
                               f"after {self.decoded} frames", item=self.item, kind="video")

    def frame(self) -> None:
        self.decoded += 1
        self.stats["decoded"] = self.stats.get("decoded", 0) + 1
        if self.decoded > self.limits.max_decoded_frames:
            n = self.limits.max_decoded_frames
            raise _exhausted("the stream decodes into over", f"{n} frames", n, "max_decoded_frames", self.item)

    def _stream(self, container):
        stream = container.streams.video[0]
        if self.threads:
            stream.thread_type = self.threads
        return stream

    def picked(self, sequential: bool):
        """(frame number, frame) for each distinct wanted frame, in order."""
        index = None if sequential else self._index()
        done = 0
        if index is not None and int(self.wanted[-1]) < index.frames:
            expected = sorted(set(self.wanted.tolist()))
            try:
                for j, (i, frame) in enumerate(self._sparse(index)):
                    if j >= len(expected) or i != expected[j]:
                        raise _NotAsIndexed()
                    yield i, frame
                    done = i + 1
                if done == expected[-1] + 1:
                    return
            except _NotAsIndexed:
                pass  # the decoder disagreed with the index: decode in order from the start
        self.counter.packets = 0
        for i, frame in self._sequential():
            if i >= done:
                yield i, frame

    def _index(self) -> video_index.StreamIndex | None:
        container = _open(self.av, self.data, self.item)
        try:
            return video_index.build(container, container.streams.video[0], self.counter)
        except self.av.FFmpegError:
            return None  # the sequential decode reports it
        finally:
            container.close()

    def _sequential(self):
        """Every frame from the first, numbered in the decoder's order, until the last wanted."""
        last = int(self.wanted[-1])
        wanted = set(self.wanted.tolist())
        self.stats.update(path="sequential", decoded=0, fed=0)
        i = -1
        with _open(self.av, self.data, self.item) as container:
            stream = self._stream(container)
            try:
                for packet in container.demux(stream):
                    self.counter.packet()
                    self.stats["fed"] += 1
                    for frame in packet.decode():
                        self.frame()
                        i += 1
                        if i in wanted:
                            yield i, frame
                        if i >= last:
                            return
            except self.av.FFmpegError as e:
                raise _bad(f"corrupt video data after {self.decoded} frames ({_why(e)})", self.item) from None

    def _sparse(self, index: video_index.StreamIndex):
        """The wanted frames from the packet runs that hold them (see ``video_index``)."""
        number = {int(index.pts[index.by_frame[i]]): int(i) for i in set(self.wanted.tolist())}
        runs = index.runs(self.wanted)
        self.counter.packets = 0
        self.stats.update(path="indexed", decoded=0, fed=0)
        with _open(self.av, self.data, self.item) as container:
            stream = self._stream(container)
            cc = stream.codec_context
            try:
                yield from self._feed(container, stream, cc, index, runs, number)
            except self.av.FFmpegError as e:
                raise _bad(f"corrupt video data after {self.decoded} frames ({_why(e)})", self.item) from None

    def _feed(self, container, stream, cc, index, runs, number):
        r, pos, last_pts, out = 0, -1, None, []
        for packet in container.demux(stream):
            if packet.size == 0 and packet.pts is None:
                continue
            pos += 1
            self.counter.packet()
            if pos >= len(index.pts) or packet.pts != index.pts[pos]:
                raise _NotAsIndexed()
            if pos < runs[r][0]:
                continue  # a packet no wanted frame depends on: not decoded
            cc.skip_frame = self.skip if packet.pts not in number and index.skippable[pos] else "DEFAULT"
            self.stats["fed"] += 1
            out = cc.decode(packet)
            if pos == runs[r][1]:
                out += cc.decode(None)  # the run's delayed frames
                cc.flush_buffers()
            for frame in out:
                self.frame()
                if frame.pts is None or (last_pts is not None and frame.pts <= last_pts):
                    raise _NotAsIndexed()  # not shown in pts order
                last_pts = frame.pts
                if frame.pts in number:
                    yield number[frame.pts], frame
            if pos == runs[r][1]:
                r += 1
                if r == len(runs):
                    return
        raise _NotAsIndexed()


class _NotAsIndexed(Exception):
    """The decoder's frames do not match the packet index (decode in order instead)."""


def _rgb(frame, meta: VideoMeta, item: int | None) -> np.ndarray:
    if (frame.height, frame.width) != (meta.height, meta.width):
        raise _bad(f"a frame of {frame.width}x{frame.height} in a stream of {meta.width}x{meta.height} "
                   "(frames of one video must share a size)", item)
    return frame.to_ndarray(format="rgb24")
