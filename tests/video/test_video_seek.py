"""Decoding only the frames sampling needs gives the frames a plain sequential PyAV decode
gives (what HF's ``read_video_pyav`` does: ``container.decode(video=0)`` numbered from the
start), on every clip kind, every frame choice, both thread types; and it decodes less:
GOPs without a sampled frame are not decoded, a GOP stops after its last sampled frame,
frames not needed that nothing references are skipped. Open GOPs (keyframes that are not
IDR) are never decode starts; AVI (no presentation times) decodes in order."""

from __future__ import annotations

import io

import numpy as np
import pytest

av = pytest.importorskip("av")

import seek_clips  # noqa: E402

from sglang_mm_grpc.carriers import VideoMeta  # noqa: E402
from sglang_mm_grpc.media import h264, video_index  # noqa: E402
from sglang_mm_grpc.media import video as media_video  # noqa: E402


@pytest.fixture(scope="module")
def clips():
    return seek_clips.make()


def plain(data: bytes) -> list[np.ndarray]:
    """Every frame as HF's loader numbers and converts them."""
    with av.open(io.BytesIO(data)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def meta_of(name: str, data: bytes, total: int) -> VideoMeta:
    if name in seek_clips.NO_FRAME_COUNT:
        with av.open(io.BytesIO(data)) as c:
            s = c.streams.video[0]
            return VideoMeta(total, float(s.average_rate), total / float(s.average_rate), s.height, s.width)
    return media_video.probe(data)


@pytest.mark.parametrize("threads", [None, "AUTO"])
@pytest.mark.parametrize("name", sorted(seek_clips.CLIPS))
def test_sampled_frames_equal_a_sequential_decode(clips, name, threads):
    ref = plain(clips[name])
    meta = meta_of(name, clips[name], len(ref))
    assert meta.total_num_frames == len(ref)
    for picks in seek_clips.choices(len(ref)):
        stats: dict = {}
        got = list(media_video.frames(clips[name], picks, meta, threads=threads, stats=stats))
        assert len(got) == len(picks)
        for i, frame in zip(picks, got):
            assert np.array_equal(frame, ref[i]), (name, picks, i)
        assert stats["path"] == ("indexed" if name in seek_clips.INDEXED else "sequential")


def test_decodes_less_where_the_stream_allows(clips):
    """Every 12th frame of 12-frame GOPs: one frame per GOP decoded when the sampled frame is
    the IDR; the last frame alone: only its GOP from its IDR."""
    data = clips["cfr_24fps_odd_61"]
    meta = media_video.probe(data)
    stats: dict = {}
    list(media_video.frames(data, list(range(0, 61, 12)), meta, stats=stats))
    assert stats == {"path": "indexed", "decoded": 6, "fed": 6}
    stats = {}
    list(media_video.frames(data, [60], meta, stats=stats))
    assert stats["fed"] == 1 and stats["decoded"] == 1  # frame 60 is the IDR of the last GOP
    stats = {}
    list(media_video.frames(data, [59], meta, stats=stats))
    at = int(_index(data).by_frame[59])  # its decode position: before the B-frames shown ahead of it
    assert 48 <= at < 60 and stats["fed"] == at - 48 + 1 and stats["decoded"] <= stats["fed"]
    seq: dict = {}
    list(media_video.frames(data, [59], meta, stats=seq, sequential=True))
    assert seq == {"path": "sequential", "decoded": 60, "fed": seq["fed"]} and seq["fed"] >= 60


def test_frames_nothing_references_are_skipped(clips):
    """x264's defaults make B-frames no other frame uses: fed, not decoded, when not sampled."""
    data = clips["one_long_gop"]
    meta = media_video.probe(data)
    stats: dict = {}
    got = list(media_video.frames(data, [119], meta, stats=stats))
    assert np.array_equal(got[0], plain(data)[119])
    assert stats["fed"] == 120 and stats["decoded"] < 100


def _keyframes(data: bytes) -> list[tuple[int, bool]]:
    """(decode position, is IDR) of each packet the container marks as a keyframe."""
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        fmt = h264.Format(s.codec_context.extradata)
        packets = [p for p in c.demux(s) if p.size]
        return [(k, fmt.access_unit(p).idr) for k, p in enumerate(packets) if p.is_keyframe]


def _index(data: bytes) -> video_index.StreamIndex | None:
    with av.open(io.BytesIO(data)) as c:
        return video_index.build(c, c.streams.video[0], video_index.Counter(10**6, float("inf"), None, None, None))


def test_open_gop_keyframes_are_not_decode_starts(clips):
    keys = _keyframes(clips["open_gop"])
    assert keys[0] == (0, True) and len(keys) > 2 and not any(idr for _, idr in keys[1:])  # recovery points
    assert _index(clips["open_gop"]).entries.tolist() == [0]
    closed = _keyframes(clips["bframes_x264_defaults"])
    assert len(closed) > 2 and all(idr for _, idr in closed)
    assert _index(clips["bframes_x264_defaults"]).entries.tolist() == [k for k, _ in closed]


def test_streams_without_presentation_times_or_h264_are_not_indexed(clips):
    assert _index(clips["avi_annexb"]) is None  # AVI: packets numbered in decode order
    assert _index(clips["mpeg4"]) is None
    assert _index(clips["mkv"]) is not None


def test_frame_numbers_follow_presentation_order(clips):
    """With B-frames, decode order differs from presentation order; frame i is the packet of
    the i-th smallest pts, and that packet decodes to the frame a sequential decode numbers i."""
    data = clips["bframes_x264_defaults"]
    index = _index(data)
    with av.open(io.BytesIO(data)) as c:
        decoded = [f.pts for f in c.decode(video=0)]
    assert decoded == [int(index.pts[p]) for p in index.by_frame]
    assert index.by_frame.tolist() != sorted(index.by_frame.tolist())  # reordered
