"""H.264 access units read without decoding: what each packet holds.

A decode may start only where it gives the same pixels as decoding from the first
packet: at an IDR picture (no picture after it references one before it), with the
parameter sets it needs already known. Deciding that, and that a packet is exactly one
picture (so the decoder returns one frame for it), needs only the NAL unit headers and
the first bit of each slice header, never the slice data.

Packets come length-prefixed (MP4 / MKV ``avcC`` extradata: its length size and
parameter sets) or in Annex B (start codes: AVI, MPEG-TS, raw).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

#: nal_unit_type values (H.264 Table 7-1)
SLICE, PARTITION_A, IDR = 1, 2, 5
PARAMETER_SETS = (7, 8, 13, 15)  # SPS, PPS, SPS extension, subset SPS


@dataclass(frozen=True)
class AccessUnit:
    """One packet's NAL units as far as seeking cares."""

    pictures: int  # slices with first_mb_in_slice 0 (a picture, or a field, starts)
    idr: bool  # its slices are IDR slices
    partitioned: bool  # data partitioning (types 2-4): not handled, sequential decode
    parameter_sets: frozenset  # the SPS / PPS NAL units it carries, as bytes
    # What the index also asks of HEVC (``hevc.AccessUnit``), fixed for H.264 as FFmpeg
    # decodes it: no sub-layers, and an IDR's no_output_of_prior_pics_flag is not read.
    temporal_id: ClassVar[int] = 0
    sublayer_nonref: ClassVar[bool] = False
    drops_waiting: ClassVar[bool] = False


class Format:
    """How packets of one stream split into NAL units."""

    def __init__(self, extradata: bytes | None):
        data = bytes(extradata or b"")
        self.length_size = 0  # 0: Annex B
        self.parameter_sets: frozenset = frozenset()
        if len(data) >= 7 and data[0] == 1:
            self.length_size = (data[4] & 3) + 1
            self.parameter_sets = frozenset(_avcc_parameter_sets(data))
        elif data:
            self.parameter_sets = frozenset(n for n in _annexb(data) if n and n[0] & 0x1F in PARAMETER_SETS)

    def nal_units(self, data) -> list | None:
        return nal_units(data, self.length_size)

    def access_unit(self, data) -> AccessUnit | None:
        """The packet's facts, or None when it is not NAL units of this format."""
        nals = self.nal_units(data)
        if nals is None:
            return None
        pictures, idr, partitioned, sets = 0, True, False, []
        for nal in nals:
            if not len(nal):
                continue
            kind = nal[0] & 0x1F
            if kind in (SLICE, IDR):
                idr = idr and kind == IDR
                pictures += len(nal) > 1 and nal[1] >> 7  # ue(v) first_mb_in_slice == 0 is the bit 1
            elif PARTITION_A <= kind < IDR:
                partitioned = True
            elif kind in PARAMETER_SETS:
                sets.append(bytes(nal))
        return AccessUnit(int(pictures), bool(idr and pictures), partitioned, frozenset(sets))


def nal_units(data, length_size: int) -> list | None:
    """The NAL units of ``data``: ``length_size``-byte big-endian lengths before each (0:
    Annex B start codes); None when a length runs past the end. HEVC frames them alike."""
    return _annexb(bytes(data)) if length_size == 0 else _prefixed(memoryview(data), length_size)


def _prefixed(view: memoryview, size: int) -> list | None:
    out, i, n = [], 0, len(view)
    while i < n:
        if i + size > n:
            return None
        length = int.from_bytes(view[i:i + size], "big")
        i += size
        if length == 0 or i + length > n:
            return None
        out.append(view[i:i + length])
        i += length
    return out


def _annexb(data: bytes) -> list:
    """NAL units between 00 00 01 start codes (a leading zero of 00 00 00 01 trimmed)."""
    out, start = [], data.find(b"\0\0\1")
    while start >= 0:
        nxt = data.find(b"\0\0\1", start + 3)
        end = len(data) if nxt < 0 else nxt
        out.append(data[start + 3:end].rstrip(b"\0") if nxt >= 0 else data[start + 3:end])
        start = nxt
    return out


def _avcc_parameter_sets(data: bytes) -> list[bytes]:
    """The SPS and PPS an ``avcC`` record carries (ISO/IEC 14496-15 5.3.3.1)."""
    out, i = [], 5
    try:
        for count_mask in (0x1F, 0xFF):
            count = data[i] & count_mask
            i += 1
            for _ in range(count):
                length = int.from_bytes(data[i:i + 2], "big")
                out.append(bytes(data[i + 2:i + 2 + length]))
                i += 2 + length
    except IndexError:
        pass
    return out
