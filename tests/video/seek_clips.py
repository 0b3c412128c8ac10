"""The clip kinds the sparse decode is proved on (CI against a plain PyAV decode, the torch
venv against HF's ``load_video``), and the frame choices tried on each."""

from __future__ import annotations

import io

import numpy as np
import videogen

MEDIUM = {"preset": "medium"}  # x264's own defaults: 3 B-frames, B-pyramid, 3 references


def x265(params: str = "") -> dict:
    """libx265 at x265's own defaults (preset medium: 4 B-frames, open GOPs, keyint 250)
    with these ``x265-params`` over them."""
    return dict(codec="hevc", x265={"x265-params": params} if params else {})


CLIPS = {
    "cfr_24fps_odd_61": dict(frames=61, fps=24, size=(64, 96), gop=12),
    "cfr_30fps_90": dict(frames=90, fps=30, size=(48, 80), gop=30, noise=10),
    "cfr_29.97fps_45": dict(frames=45, fps=30000 / 1001, size=(58, 114), gop=10),
    "cfr_8fps_odd_17": dict(frames=17, fps=8, size=(56, 56), gop=4),
    "vfr": dict(frames=40, fps=25, size=(64, 96), vfr=True, gop=8),
    "rotated_90": dict(frames=30, fps=30, size=(64, 96), rotation=90, gop=9),
    "mpeg4": dict(frames=33, fps=12, size=(72, 88), codec="mpeg4", gop=10),
    "bframes_x264_defaults": dict(frames=96, fps=25, size=(64, 96), gop=24, x264=MEDIUM),
    "open_gop": dict(frames=96, fps=25, size=(64, 96), gop=24, x264={**MEDIUM, "x264-params": "open-gop=1"}),
    "short_gops": dict(frames=50, fps=25, size=(64, 96), gop=2, x264=MEDIUM),
    "one_long_gop": dict(frames=120, fps=30, size=(64, 96), x264=MEDIUM),  # x264's keyint 250
    "avi_annexb": dict(frames=40, fps=25, size=(64, 96), container="avi", gop=9, x264=MEDIUM),
    "mkv": dict(frames=40, fps=25, size=(64, 96), container="matroska", gop=9, x264=MEDIUM),
    # HEVC: IDR_N_LP starts (closed GOPs), CRA recovery points with RASL pictures (open
    # GOPs: never starts), IDR_W_RADL with leading pictures (radl), sub-layers
    "hevc_closed_gop_odd_61": dict(frames=61, fps=24, size=(64, 96), **x265("keyint=12:open-gop=0")),
    "hevc_open_gop": dict(frames=96, fps=25, size=(64, 96), **x265("keyint=24")),
    "hevc_short_gops": dict(frames=50, fps=25, size=(64, 96), **x265("keyint=3:open-gop=0")),
    "hevc_one_long_gop": dict(frames=120, fps=30, size=(64, 96), **x265()),  # x265's keyint 250
    "hevc_no_bframes_odd_33": dict(frames=33, fps=30000 / 1001, size=(58, 114), noise=10,
                                   **x265("bframes=0:keyint=8:open-gop=0")),
    "hevc_radl": dict(frames=45, fps=25, size=(64, 96), **x265("keyint=10:open-gop=0:radl=2")),
    "hevc_sublayers": dict(frames=47, fps=25, size=(64, 96), **x265("temporal-layers=3:keyint=16:open-gop=0")),
    "hevc_mkv": dict(frames=41, fps=25, size=(64, 96), container="matroska", **x265("keyint=8:open-gop=0:radl=2")),
}
#: Clips whose packets index (H.264 or HEVC with presentation times: MP4, Matroska): decoded apart.
INDEXED = {n for n, kw in CLIPS.items()
           if kw.get("codec", "h264") in ("h264", "hevc") and kw.get("container", "mp4") in ("mp4", "matroska")}
HEVC = {n for n, kw in CLIPS.items() if kw.get("codec") == "hevc"}
#: Matroska from PyAV carries no frame count: HF cannot sample it (the header is refused).
NO_FRAME_COUNT = {"mkv", "hevc_mkv"}


def choices(total: int) -> list[list[int]]:
    """Sampled frame lists: every frame, every 7th, one in the middle, the last, repeats,
    a frame just before and after each GOP edge of a 12 / 24 frame GOP, a wide stride."""
    picks = [
        list(range(total)),
        list(range(0, total, 7)),
        [total // 2],
        [total - 1],
        [0, 0, 3, 3, total - 1, total - 1],
        sorted({i for g in (12, 24) for k in range(1, total // g + 1) for i in (k * g - 1, k * g) if i < total}),
        list(range(0, total, max(1, total // 4))),
    ]
    return [p for p in picks if p]


def make() -> dict[str, bytes]:
    return {name: videogen.clip(**kw) for name, kw in CLIPS.items()}


def plain(data: bytes) -> list[np.ndarray]:
    """Every frame as HF's loader numbers and converts them (``container.decode(video=0)``)."""
    import av

    with av.open(io.BytesIO(data)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def index(data: bytes):
    """The packet index of the clip's video stream (no limits), or None."""
    import av

    from sglang_mm_grpc.media import video_index

    with av.open(io.BytesIO(data)) as c:
        return video_index.build(c, c.streams.video[0], video_index.Counter(10**6, float("inf"), None, None, None))
