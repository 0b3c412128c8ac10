"""Decoding only the frames sampling needs gives the frames a plain sequential PyAV decode
gives (what HF's ``read_video_pyav`` does: ``container.decode(video=0)`` numbered from the
start), on every clip kind, every frame choice, both thread types; and it decodes less:
GOPs without a sampled frame are not decoded, a GOP stops after its last sampled frame,
frames not needed that nothing references are skipped. Open GOPs (keyframes that are not
IDR) are never decode starts; AVI (no presentation times) decodes in order. Odd HEVC
(broken or unusual NAL units) is not indexed: it decodes in order, as HF's loader does, or
fails with INVALID_ARGUMENT where that decode fails."""

from __future__ import annotations

import io

import numpy as np
import pytest

av = pytest.importorskip("av")

import seek_clips  # noqa: E402
import videogen  # noqa: E402

from sglang_mm_grpc.core.carriers import VideoMeta  # noqa: E402
from sglang_mm_grpc.core.errors import Code, PreprocessError  # noqa: E402
from sglang_mm_grpc.media import h264, hevc  # noqa: E402
from sglang_mm_grpc.media import video as media_video  # noqa: E402


@pytest.fixture(scope="module")
def clips():
    return seek_clips.make()


plain = seek_clips.plain


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


_index = seek_clips.index


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


def _hevc_odd() -> dict[str, bytes]:
    """The closed-GOP x265 clip (IDR every 12 frames) with one thing broken or unusual."""
    base = videogen.clip(**seek_clips.CLIPS["hevc_closed_gop_odd_61"])
    with av.open(io.BytesIO(base)) as c:
        s = c.streams.video[0]
        extradata = bytes(s.codec_context.extradata)
        packets = [bytes(p) for p in c.demux(s) if p.size]
    pps = next(u for u in hevc.Format(extradata).parameter_sets if u[0] >> 1 == hevc.PPS)
    assert pps[2] >> 6 == 3  # pps_id 0, sps_id 0 (one bit each): output_flag_present_flag is bit 3
    hiding = pps[:2] + bytes([pps[2] | 0x10]) + pps[3:]

    def unit(nal: bytes) -> bytes:
        return len(nal).to_bytes(4, "big") + nal

    def at(k0: int, edit):
        return lambda k, b: edit(b) if k == k0 else b

    def byte(i: int, f):
        return lambda b: b[:i] + bytes([f(b[i])]) + b[i + 1:]

    edits = {  # byte 4, 5: the NAL unit header; byte 6: the slice segment header's first
        "forbidden_bit": at(5, byte(4, lambda x: x | 0x80)),
        "other_layer": at(5, byte(5, lambda x: x | 0x08)),
        "temporal_id_plus1_zero": at(5, byte(5, lambda x: x & 0xF8)),
        "reserved_type": at(5, byte(4, lambda x: 10 << 1 | (x & 0x81))),
        "bla": at(12, byte(4, lambda x: 18 << 1 | (x & 0x81))),
        "cra_first": at(0, byte(4, lambda x: 21 << 1 | (x & 0x81))),
        "no_output_of_prior_pics": at(24, byte(6, lambda x: x | 0x40)),
        "nal_length_past_end": at(5, lambda b: (int.from_bytes(b[:4], "big") + 1000).to_bytes(4, "big") + b[4:]),
        "cut_packet": at(5, lambda b: b[:len(b) // 2]),
        "garbage_packet": at(5, lambda b: np.random.default_rng(3).integers(0, 256, len(b), np.uint8).tobytes()),
        "empty_nal": at(5, lambda b: b + bytes(4)),
        "end_of_sequence": at(11, lambda b: b + unit(b"\x48\x01")),
        "two_pictures": lambda k, b: b + packets[6] if k == 5 else (None if k == 6 else b),
        "pps_hides_pictures": at(12, lambda b: unit(hiding) + b),
        "annexb_packets": lambda k, b: b"\0\0\0\1" + b[4:],
    }
    odd = {name: videogen.rewrite_packets(base, edit) for name, edit in edits.items()}
    odd["hvcc_cut"] = videogen.rewrite_packets(base, lambda k, b: b, extradata=extradata[:30])
    return odd


HEVC_ODD = sorted(["forbidden_bit", "other_layer", "temporal_id_plus1_zero", "reserved_type", "bla", "cra_first",
                   "no_output_of_prior_pics", "nal_length_past_end", "cut_packet", "garbage_packet", "empty_nal",
                   "end_of_sequence", "two_pictures", "pps_hides_pictures", "annexb_packets", "hvcc_cut"])


@pytest.fixture(scope="module")
def hevc_odd():
    odd = _hevc_odd()
    assert sorted(odd) == HEVC_ODD
    return odd


def _plain_until_error(data: bytes) -> tuple[list[np.ndarray], bool]:
    """The frames a sequential decode returns before it fails, and whether it failed."""
    got = []
    try:
        with av.open(io.BytesIO(data)) as c:
            for f in c.decode(video=0):
                got.append(f.to_ndarray(format="rgb24"))
    except av.FFmpegError:
        return got, True
    return got, False


@pytest.mark.parametrize("name", HEVC_ODD)
def test_odd_hevc_decodes_in_order_or_fails_cleanly(hevc_odd, name):
    data = hevc_odd[name]
    try:
        meta = media_video.probe(data)
    except PreprocessError as e:
        assert name == "hvcc_cut" and e.code is Code.INVALID_ARGUMENT and "container" in e.message
        return
    assert _index(data) is None
    ref, failed = _plain_until_error(data)
    for picks in ([0, 30, 60], [5], [60], [0, len(ref) // 2, len(ref) - 1]):
        picks = [i for i in picks if i >= 0]
        stats: dict = {}
        try:
            got = list(media_video.frames(data, picks, meta, stats=stats))
        except PreprocessError as e:
            assert e.code is Code.INVALID_ARGUMENT and (failed or max(picks) >= len(ref)), (name, picks, e)
            continue
        assert stats["path"] == "sequential" and max(picks) < len(ref)
        assert all(np.array_equal(g, ref[i]) for g, i in zip(got, picks)), (name, picks)


def test_hevc_refusals_guard_the_numbering(hevc_odd):
    """Two of the refusals change what a sequential decode returns: an IDR's
    no_output_of_prior_pics_flag discards the pictures waiting for output, and the slices
    after a PPS with output_flag_present_flag read one more bit."""
    assert len(_plain_until_error(hevc_odd["no_output_of_prior_pics"])[0]) < 61
    assert len(_plain_until_error(hevc_odd["pps_hides_pictures"])[0]) < 61
