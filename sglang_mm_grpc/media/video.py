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
from typing import Iterator, Sequence

import numpy as np

from ..carriers import VideoMeta
from ..errors import Code, PreprocessError

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
           item: int | None = None, deadline: float | None = None, rotation: list | None = None
           ) -> Iterator[np.ndarray]:
    """uint8 [H, W, 3] for each of ``indices`` (ascending; repeats yield the same frame
    again), numbered as ``read_video_pyav`` numbers them. ``deadline``: a
    ``time.monotonic()`` value the decode must end by (with ``limits.decode_timeout_s``,
    the earlier wins). ``rotation``: a list the first frame's rotation is appended to."""
    av = _av()
    if len(indices) > limits.max_sampled_frames:
        raise _exhausted("sampling takes", f"{len(indices)} frames", limits.max_sampled_frames,
                         "max_sampled_frames", item)
    if not len(indices):
        return
    budget = _budget(limits, deadline)
    wanted = np.asarray(indices, dtype=np.int64)
    last = int(wanted[-1])
    container = _open(av, data, item)
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"  # frame threads: the same frames, decoded sooner
        k = 0  # next position in ``wanted``
        for i, frame in enumerate(_decoded(av, container, stream, limits, budget, item)):
            if rotation is not None and i == 0:
                rotation.append(int(getattr(frame, "rotation", 0) or 0) % 360)
            if i < wanted[k]:
                continue
            rgb = _rgb(frame, meta, item)
            while k < len(wanted) and wanted[k] == i:
                yield rgb
                k += 1
            if i >= last:
                return
        raise _bad(f"the video stream ends after fewer frames than its header claims ({meta.total_num_frames}); "
                   f"frame {int(wanted[k])} is missing", item)
    finally:
        container.close()


def _budget(limits: VideoLimits, deadline: float | None) -> tuple[float, str]:
    """(the monotonic time decoding must end by, what set it)."""
    own = time.monotonic() + limits.decode_timeout_s
    if deadline is not None and deadline < own:
        return deadline, "the request's deadline"
    return own, f"decode_timeout_s {limits.decode_timeout_s:g} s"


def _decoded(av, container, stream, limits: VideoLimits, budget: tuple[float, str], item: int | None):
    """The decoder's frames in order, the packet, frame and time limits checked between packets."""
    end, source = budget
    packets = decoded = 0
    try:
        for packet in container.demux(stream):
            packets += 1
            if packets > limits.max_packets:
                raise _exhausted("the stream holds over", f"{limits.max_packets} packets", limits.max_packets,
                                 "4 x max_decoded_frames + 1024 packets", item)
            if time.monotonic() > end:
                raise PreprocessError(Code.DEADLINE_EXCEEDED, f"decoding took longer than its budget ({source}) "
                                      f"after {decoded} frames", item=item, kind="video")
            for frame in packet.decode():
                decoded += 1
                if decoded > limits.max_decoded_frames:
                    raise _exhausted("the stream decodes into over", f"{limits.max_decoded_frames} frames",
                                     limits.max_decoded_frames, "max_decoded_frames", item)
                yield frame
    except av.FFmpegError as e:
        raise _bad(f"corrupt video data after {decoded} frames ({_why(e)})", item) from None


def _rgb(frame, meta: VideoMeta, item: int | None) -> np.ndarray:
    if (frame.height, frame.width) != (meta.height, meta.width):
        raise _bad(f"a frame of {frame.width}x{frame.height} in a stream of {meta.width}x{meta.height} "
                   "(frames of one video must share a size)", item)
    return frame.to_ndarray(format="rgb24")
