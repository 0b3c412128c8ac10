"""Real video files made with PyAV (libx264, libx265 and mpeg4 ship in its wheel), for tests and benches.

    clip(frames=..., fps=..., size=(h, w), codec="h264"|"hevc"|"mpeg4", container="mp4"|"avi"|"mkv",
         rotation=..., vfr=False, gop=..., noise=...) -> bytes
    hostile() -> {name: bytes}     # files each refused with their own status (see HOSTILE)
    rewrite_packets(data, edit) -> bytes   # the same stream with each packet's bytes edited

Frames are a moving gradient with a frame counter pattern and optional sensor-like noise, so
resize and sampling errors show in the pixels and the encoder has real work.
"""

from __future__ import annotations

import io
import struct
from fractions import Fraction

import numpy as np


def _frame(i: int, h: int, w: int, rng: np.random.Generator, noise: float) -> np.ndarray:
    y = np.arange(h, dtype=np.float32)[:, None]
    x = np.arange(w, dtype=np.float32)[None, :]
    r = (x * 255.0 / max(w - 1, 1) + 7 * i) % 256
    g = (y * 255.0 / max(h - 1, 1) + 3 * i) % 256
    b = ((x + y) * 2 + 11 * i) % 256
    img = np.stack(np.broadcast_arrays(r, g, b), axis=-1)
    s = max(4, min(h, w) // 8)  # a bright square walking across: each frame differs
    y0, x0 = (5 * i) % max(h - s, 1), (9 * i) % max(w - s, 1)
    img[y0:y0 + s, x0:x0 + s] = 255 - img[y0:y0 + s, x0:x0 + s]
    if noise:
        img = img + rng.normal(0, noise, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def clip(frames: int = 12, fps: float = 24, size: tuple[int, int] = (64, 96), codec: str = "h264",
         container: str = "mp4", rotation: int = 0, vfr: bool = False, gop: int | None = None, noise: float = 0.0,
         seed: int = 0, crf: int = 23, audio: bool = False, x264: dict | None = None,
         x265: dict | None = None) -> bytes:
    """An encoded clip of ``frames`` frames at ``fps`` (h, w = ``size``; even sizes for
    yuv420p). ``rotation``: a display matrix on the stream (degrees). ``vfr``: frame
    durations vary (1, 2 or 3 ticks of 1/(fps*2)). ``gop``: keyframe interval. ``x264``:
    libx264 options over the defaults here (e.g. ``{"preset": "medium"}`` for x264's own
    defaults, ``{"x264-params": "open-gop=1"}``). ``x265``: libx265 options over x265's
    own defaults (preset medium: B-frames, open GOPs, keyint 250), its ``x265-params``
    after ``log-level=error`` (e.g. ``{"x265-params": "keyint=12:open-gop=0"}``)."""
    import av

    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    h, w = size
    with av.open(buf, mode="w", format=container) as out:
        rate = Fraction(fps).limit_denominator(1001)
        stream = out.add_stream({"h264": "libx264", "hevc": "libx265"}.get(codec, codec), rate=rate)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        if codec == "h264":
            stream.options = {"crf": str(crf), "preset": "veryfast", **(x264 or {})}
        if codec == "hevc":
            params = ":".join(p for p in ("log-level=error", (x265 or {}).get("x265-params")) if p)
            stream.options = {"crf": str(crf), "preset": "medium", **(x265 or {}), "x265-params": params}
        if gop is not None:
            stream.codec_context.gop_size = gop
        if vfr:
            stream.codec_context.time_base = Fraction(1, int(round(fps * 2)))
            stream.time_base = stream.codec_context.time_base
        if rotation:
            stream.set_display_rotation(rotation)
        pts = 0
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(_frame(i, h, w, rng, noise), format="rgb24")
            if vfr:
                frame.pts = pts
                pts += 1 + (i * 7) % 3
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def audio_only() -> bytes:
    """A second of a sine in WAV: no video stream."""
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=8000)
        t = np.arange(8000) / 8000
        samples = (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16)[None, :]
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.rate = 8000
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def _avi_patch(data: bytes, **fields) -> bytes:
    """An AVI with header fields replaced: ``frames`` (avih dwTotalFrames and strh
    dwLength), ``size`` ((w, h) in avih and the stream's BITMAPINFOHEADER), ``rate``
    ((scale, rate) of strh)."""
    b = bytearray(data)
    avih = b.index(b"avih") + 8
    strh = b.index(b"strh") + 8
    strf = b.index(b"strf") + 8
    if "frames" in fields:
        struct.pack_into("<I", b, avih + 16, fields["frames"])
        struct.pack_into("<I", b, strh + 32, fields["frames"])
    if "size" in fields:
        w, h = fields["size"]
        struct.pack_into("<II", b, avih + 32, w, h)
        struct.pack_into("<ii", b, strf + 4, w, h)
    if "rate" in fields:
        scale, rate = fields["rate"]
        struct.pack_into("<II", b, strh + 20, scale, rate)
    return bytes(b)


def _tiny_chunks(data: bytes, count: int) -> bytes:
    """An AVI (H.264) whose movi list holds ``count`` chunks of an access unit delimiter
    alone before its frames: the decoder takes packet after packet that make no frame
    (the header claims few frames)."""
    b = bytearray(data)
    first = b.index(b"00dc", b.index(b"movi"))  # after the first frame (it holds the parameter sets)
    movi = first + 8 + struct.unpack_from("<I", b, first + 4)[0]
    movi += movi % 2
    filler = b"00dc" + struct.pack("<I", 6) + b"\0\0\0\1\x09\xf0"  # an H.264 access unit delimiter alone
    b[movi:movi] = filler * count
    riff = struct.unpack_from("<I", b, 4)[0]
    struct.pack_into("<I", b, 4, riff + len(filler) * count)
    lst = b.rindex(b"LIST", 0, movi)
    struct.pack_into("<I", b, lst + 4, struct.unpack_from("<I", b, lst + 4)[0] + len(filler) * count)
    return bytes(b)


def _decoder_spin(count: int = 1_000_000) -> bytes:
    """An AVI (H.264) whose header claims 8 frames and whose movi list holds ``count``
    packets of an end-of-sequence NAL unit alone after its first frame: the decoder takes
    each without an error and without a frame (HF's loader would read all of them, a few
    microseconds each); 14 bytes a packet, 14 MB for a million."""
    b = bytearray(clip(frames=8, fps=24, size=(64, 64), container="avi"))
    first = b.index(b"00dc", b.index(b"movi"))
    movi = first + 8 + struct.unpack_from("<I", b, first + 4)[0]
    movi += movi % 2
    filler = b"00dc" + struct.pack("<I", 5) + b"\0\0\0\1\x0a" + b"\0"  # end of sequence, padded to even
    b[movi:movi] = filler * count
    riff = struct.unpack_from("<I", b, 4)[0]
    struct.pack_into("<I", b, 4, riff + len(filler) * count)
    lst = b.rindex(b"LIST", 0, movi)
    struct.pack_into("<I", b, lst + 4, struct.unpack_from("<I", b, lst + 4)[0] + len(filler) * count)
    return bytes(b)


def _absurd_timestamps() -> bytes:
    """An MP4 whose media timescale is 0: the demuxer falls back to 1/512 s ticks, and the
    few frames claim a rate of 1/512 fps (hours of video)."""
    b = bytearray(clip(frames=8, fps=24, size=(64, 64)))
    mdhd = b.index(b"mdhd")
    struct.pack_into(">I", b, mdhd + 16, 0)  # version 0: flags, ctime, mtime, then the timescale
    return bytes(b)


def _raw_avi(frames: int = 4, size: int = 64) -> bytes:
    """Uncompressed frames in AVI: the frame size lives in the header alone."""
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="avi") as out:
        stream = out.add_stream("rawvideo", rate=24)
        stream.width = stream.height = size
        stream.pix_fmt = "bgr24"
        rng = np.random.default_rng(0)
        for i in range(frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(_frame(i, size, size, rng, 0), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


#: name -> (the status code it gets, a word its message holds)
HOSTILE = {
    "truncated": ("INVALID_ARGUMENT", "container"),
    "truncated_faststart": ("INVALID_ARGUMENT", "corrupt"),
    "corrupt": ("INVALID_ARGUMENT", "container"),
    "garbage_payload": ("INVALID_ARGUMENT", ""),
    "claims_10M_frames": ("RESOURCE_EXHAUSTED", "max_decoded_frames"),
    "huge_frames": ("RESOURCE_EXHAUSTED", "max_frame_pixels"),
    "frames_100k_x_100k": ("INVALID_ARGUMENT", "frame size"),
    "zero_fps": ("INVALID_ARGUMENT", "frame rate"),
    "audio_only": ("INVALID_ARGUMENT", "no video stream"),
    "tiny_packets": ("INVALID_ARGUMENT", "corrupt"),
    "decoder_spin": ("RESOURCE_EXHAUSTED", "packets"),
    "absurd_timestamps": ("RESOURCE_EXHAUSTED", "max_duration_s"),
    "empty": ("INVALID_ARGUMENT", "container"),
}


def hostile() -> dict[str, bytes]:
    """Files that must each get their status quickly, with bounded memory (``HOSTILE``)."""
    mp4 = clip(frames=24, fps=24, size=(64, 96))
    fast = _faststart(clip(frames=48, fps=24, size=(64, 96), noise=20))
    avi = clip(frames=8, fps=24, size=(64, 64), codec="mpeg4", container="avi")
    raw = _raw_avi()
    rng = np.random.default_rng(1)
    garbage = bytearray(fast)
    mdat = garbage.index(b"mdat") + 64
    garbage[mdat:mdat + 4000] = rng.integers(0, 256, 4000, dtype=np.uint8).tobytes()
    return {
        "truncated": mp4[: len(mp4) // 2],
        "truncated_faststart": fast[: len(fast) * 2 // 5],
        "corrupt": rng.integers(0, 256, 20000, dtype=np.uint8).tobytes(),
        "garbage_payload": bytes(garbage),
        "claims_10M_frames": _avi_patch(avi, frames=10_000_000),
        "huge_frames": _avi_patch(raw, size=(5000, 5000)),
        "frames_100k_x_100k": _avi_patch(raw, size=(100_000, 100_000)),
        "zero_fps": clip(frames=6, fps=24, size=(64, 64), codec="mpeg4", container="nut"),  # no rate in NUT
        "audio_only": audio_only(),
        "tiny_packets": _tiny_chunks(clip(frames=8, fps=24, size=(64, 64), container="avi"), 60_000),
        "decoder_spin": _decoder_spin(),
        "absurd_timestamps": _absurd_timestamps(),
        "empty": b"",
    }


def rewrite_packets(data: bytes, edit, container: str = "mp4", extradata: bytes | None = None) -> bytes:
    """The first video stream of ``data`` remuxed (no re-encode) with each packet's bytes
    replaced by ``edit(k, bytes)`` (k: the packet's decode position; None drops it), and its
    extradata by ``extradata`` when given: NAL units added, cut or relabelled in place of
    what an encoder writes."""
    import av

    buf = io.BytesIO()
    with av.open(io.BytesIO(data)) as src, av.open(buf, mode="w", format=container) as dst:
        s = src.streams.video[0]
        d = dst.add_stream_from_template(s)
        if extradata is not None:
            d.codec_context.extradata = extradata
        k = 0
        for packet in src.demux(s):
            if packet.size == 0 and packet.pts is None:
                continue
            body = edit(k, bytes(packet))
            k += 1
            if body is None:
                continue
            out = av.Packet(body)
            out.pts, out.dts, out.time_base = packet.pts, packet.dts, packet.time_base
            out.is_keyframe = packet.is_keyframe
            out.stream = d
            dst.mux(out)
    return buf.getvalue()


def _faststart(mp4: bytes) -> bytes:
    """The same clip with its index (moov) before the frames, remuxed with PyAV (through a
    file: the muxer rewrites it), so a cut file opens and then runs out of frames."""
    import os
    import tempfile

    import av

    fd, path = tempfile.mkstemp(suffix=".mp4")
    os.close(fd)
    try:
        with av.open(io.BytesIO(mp4)) as src, av.open(path, mode="w", format="mp4",
                                                      options={"movflags": "faststart"}) as dst:
            s = src.streams.video[0]
            d = dst.add_stream_from_template(s)
            for packet in src.demux(s):
                if packet.dts is None:
                    continue
                packet.stream = d
                dst.mux(packet)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)
