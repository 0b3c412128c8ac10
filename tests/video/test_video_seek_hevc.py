"""HEVC's packet index on x265 clips: decodes start only at IDR pictures (IDR_N_LP,
IDR_W_RADL), never at a CRA (its RASL pictures use pictures before it); GOPs without a
sampled frame are not decoded; FFmpeg's ``skip_frame=NONREF`` drops exactly the
sub-layer non-reference pictures, so it is set only where none of them is used by a
higher sub-layer; new parameter sets mid-stream leave the first packet the only start.
Every decode here is compared pixel for pixel with a plain sequential PyAV decode (HF's
``read_video_pyav``); the clips' frame choices on both thread types are in
test_video_seek.py, against ``load_video`` in test_video_seek_hf.py."""

from __future__ import annotations

import io

import numpy as np
import pytest

av = pytest.importorskip("av")

import seek_clips  # noqa: E402
import videogen  # noqa: E402

from sglang_mm_grpc.media import hevc  # noqa: E402
from sglang_mm_grpc.media import video as media_video  # noqa: E402

plain, index = seek_clips.plain, seek_clips.index
IDR, CRA, RASL = (hevc.IDR_W_RADL, hevc.IDR_N_LP), hevc.CRA, (8, 9)


@pytest.fixture(scope="module")
def clips():
    return {name: videogen.clip(**seek_clips.CLIPS[name]) for name in sorted(seek_clips.HEVC)}


def packets(data: bytes) -> list[bytes]:
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        return [bytes(p) for p in c.demux(s) if p.size]


def pictures(data: bytes) -> list[tuple[int, int]]:
    """(nal_unit_type, TemporalId) of each packet's picture, in decode order."""
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        fmt = hevc.Format(s.codec_context.extradata)
        units = [fmt.nal_units(p) for p in c.demux(s) if p.size]
    return [next((n[0] >> 1 & 0x3F, (n[1] & 7) - 1) for n in nals if (n[0] >> 1 & 0x3F) in hevc.PICTURES)
            for nals in units]


def decode(data: bytes, picks: list[int], **kw) -> tuple[list[np.ndarray], dict]:
    stats: dict = {}
    meta = media_video.probe(data) if kw.pop("probe", True) else kw.pop("meta")
    return list(media_video.frames(data, picks, meta, stats=stats, **kw)), stats


def test_idr_pictures_are_the_decode_starts(clips):
    for name in ("hevc_closed_gop_odd_61", "hevc_short_gops", "hevc_no_bframes_odd_33", "hevc_radl", "hevc_mkv"):
        kinds = [t for t, _ in pictures(clips[name])]
        idrs = [k for k, t in enumerate(kinds) if t in IDR]
        assert len(idrs) > 2 and CRA not in kinds, name
        assert index(clips[name]).entries.tolist() == idrs, name
    assert hevc.IDR_W_RADL in [t for t, _ in pictures(clips["hevc_radl"])]  # radl: leading pictures allowed


def test_cra_pictures_are_never_decode_starts(clips):
    data = clips["hevc_open_gop"]
    kinds = [t for t, _ in pictures(data)]
    cras = [k for k, t in enumerate(kinds) if t == CRA]
    assert kinds[0] in IDR and len(cras) >= 2 and set(RASL) & set(kinds)
    ix = index(data)
    assert ix.entries.tolist() == [0]
    at = cras[-1]  # the frame the last CRA shows, decoded from the first packet
    frame = int(np.flatnonzero(ix.by_frame == at)[0])
    (got,), stats = decode(data, [frame])
    assert np.array_equal(got, plain(data)[frame])
    assert stats["path"] == "indexed" and stats["fed"] == at + 1


def test_only_the_gops_of_sampled_frames_are_decoded(clips):
    data = clips["hevc_closed_gop_odd_61"]  # IDR every 12 frames
    ref = plain(data)
    got, stats = decode(data, list(range(0, 61, 12)))
    assert stats == {"path": "indexed", "decoded": 6, "fed": 6}
    assert all(np.array_equal(g, ref[i]) for g, i in zip(got, range(0, 61, 12)))
    got, stats = decode(data, [59])
    at = int(index(data).by_frame[59])
    assert 48 <= at < 60 and stats["fed"] == at - 48 + 1 and np.array_equal(got[0], ref[59])
    _, seq = decode(data, [59], sequential=True)
    assert seq["decoded"] == 60 and seq["fed"] >= 60


def test_nonref_skips_exactly_the_sublayer_nonref_pictures(clips):
    """x265 marks the B-frames nothing references TRAIL_N: fed, not decoded, unless sampled."""
    data = clips["hevc_one_long_gop"]
    kinds = [t for t, _ in pictures(data)]
    ix = index(data)
    (got,), stats = decode(data, [119])
    assert np.array_equal(got, plain(data)[119])
    wanted = int(ix.by_frame[119])
    skipped = sum(1 for k, t in enumerate(kinds) if t in hevc.SUBLAYER_NONREF and k != wanted)
    assert stats["fed"] == 120 and skipped > 30 and stats["decoded"] == 120 - skipped
    _, kept = decode(data, [119], skip_nonref=False)
    assert kept["decoded"] == 120


def test_no_bframes(clips):
    """Every picture a reference (nothing to skip in a GOP), GOPs still skipped."""
    data = clips["hevc_no_bframes_odd_33"]  # IDR every 8 frames
    assert {t for t, _ in pictures(data)} == {1, hevc.IDR_N_LP}
    (got,), stats = decode(data, [31])
    assert np.array_equal(got, plain(data)[31])
    assert stats == {"path": "indexed", "decoded": 8, "fed": 8}
    _, seq = decode(data, [31], sequential=True)
    assert seq["decoded"] == 32


def _feed_all(data: bytes, skip: np.ndarray) -> dict[int, np.ndarray]:
    """Every packet fed, with NONREF where ``skip`` says: the frames returned, by pts."""
    out = {}
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        cc = s.codec_context
        k = 0
        for p in c.demux(s):
            if p.size == 0 and p.pts is None:
                continue
            cc.skip_frame = "NONREF" if skip[k] else "DEFAULT"
            k += 1
            out.update((f.pts, f.to_ndarray(format="rgb24")) for f in cc.decode(p))
        out.update((f.pts, f.to_ndarray(format="rgb24")) for f in cc.decode(None))
    return out


def test_sublayer_nonref_pictures_below_the_top_sublayer_are_not_skipped(clips):
    data = clips["hevc_sublayers"]  # x265 temporal-layers=3: TemporalId 0, 1, 2
    kinds = pictures(data)
    ix = index(data)
    below = [k for k, (t, tid) in enumerate(kinds) if t in hevc.SUBLAYER_NONREF and tid < 2]
    assert below and np.flatnonzero(~ix.skippable).tolist() == below
    assert sum(t in hevc.SUBLAYER_NONREF for t, _ in kinds) > 3 * len(below)  # the top sub-layer's are skipped
    # Relabel the TemporalId-0 trailing pictures TRAIL_N: NONREF on every packet drops the
    # pictures others use (and those frames with them); where ``skippable`` says, nothing changes.
    relabelled = videogen.rewrite_packets(data, lambda k, b: _relabel(b, 0) if kinds[k] == (1, 0) else b)
    ix = index(relabelled)
    ref = {int(p): f for p, f in zip(np.sort(ix.pts), plain(relabelled))}
    assert len(ref) == len(kinds)
    assert not ix.skippable[[k for k, kt in enumerate(kinds) if kt == (1, 0)]].any()
    ruled = _feed_all(relabelled, ix.skippable)
    assert all(np.array_equal(f, ref[p]) for p, f in ruled.items())
    assert len(ruled) == len(ref) - int(np.sum([t in hevc.SUBLAYER_NONREF and tid == 2 for t, tid in kinds]))
    everywhere = _feed_all(relabelled, np.ones(len(kinds), bool))
    assert len(everywhere) < len(ruled) // 2
    for picks in ([46], list(range(0, 47, 5))):
        got, stats = decode(relabelled, picks)
        assert stats["path"] == "indexed" and all(np.array_equal(g, ref[int(ix.pts[ix.by_frame[i]])])
                                                  for g, i in zip(got, picks))


def _relabel(packet: bytes, kind: int) -> bytes:
    """A one-NAL length-prefixed packet with its nal_unit_type replaced."""
    b = bytearray(packet)
    b[4] = kind << 1 | (b[4] & 0x81)
    return bytes(b)


def _with_units(packet: bytes, units) -> bytes:
    return b"".join(len(u).to_bytes(4, "big") + u for u in units) + packet


def test_new_parameter_sets_leave_the_first_packet_the_only_start(clips):
    data = clips["hevc_closed_gop_odd_61"]
    with av.open(io.BytesIO(data)) as c:
        sets = sorted(hevc.Format(c.streams.video[0].codec_context.extradata).parameter_sets)
    assert len(sets) == 3
    idrs = index(data).entries.tolist()
    same = videogen.rewrite_packets(data, lambda k, b: _with_units(b, sets) if k in idrs else b)
    assert index(same).entries.tolist() == idrs  # repeated in band (as hev1 streams do): known
    pps = next(s for s in sets if s[0] >> 1 == hevc.PPS)
    other = videogen.rewrite_packets(data, lambda k, b: _with_units(b, [pps + b"\0"]) if k == 30 else b)
    assert index(other).entries.tolist() == [0]
    ref = plain(other)
    got, stats = decode(other, [50, 60])
    assert stats["path"] == "indexed" and np.array_equal(got[0], ref[50]) and np.array_equal(got[1], ref[60])


def test_hvcc_records_cut_short_are_refused(clips):
    with av.open(io.BytesIO(clips["hevc_closed_gop_odd_61"])) as c:
        extradata = bytes(c.streams.video[0].codec_context.extradata)
    fmt = hevc.Format(extradata)
    assert fmt.usable and fmt.length_size == 4 and len(fmt.parameter_sets) == 3
    assert not any(hevc.Format(extradata[:n]).usable for n in range(23, len(extradata)))
    assert hevc.Format(extradata[:22]).length_size == 0  # too short for hvcC: read as Annex B, as FFmpeg does


def test_annexb_reads_as_the_hvcc_stream(clips):
    """The same stream in start codes (Annex B extradata and packets) gives the same facts."""
    data = clips["hevc_closed_gop_odd_61"]
    with av.open(io.BytesIO(data)) as c:
        fmt = hevc.Format(c.streams.video[0].codec_context.extradata)
    annexb = hevc.Format(b"".join(b"\0\0\0\1" + u for u in sorted(fmt.parameter_sets)))
    assert annexb.usable and annexb.length_size == 0 and annexb.parameter_sets == fmt.parameter_sets
    for packet in packets(data):
        units = fmt.nal_units(packet)
        assert fmt.access_unit(packet).pictures == 1
        assert annexb.access_unit(b"".join(b"\0\0\1" + bytes(u) for u in units)) == fmt.access_unit(packet)
