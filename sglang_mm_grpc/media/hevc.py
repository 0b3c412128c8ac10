"""HEVC (H.265) access units read without decoding: what each packet holds.

The questions are H.264's (see ``h264``): is a packet exactly one picture, may a decode
start at it, which parameter sets does it carry. In HEVC the answers are in the two-byte
NAL unit headers and the first bits of each slice segment header:

- a decode may start only at an IDR picture (IDR_W_RADL, IDR_N_LP): no picture after it
  in decode order references one before it. A CRA's RASL pictures do, so a CRA is never
  a start; BLA pictures (whose RASL pictures the decoder drops) and end-of-sequence NAL
  units (after which a CRA's RASL pictures are dropped) make packets and frames differ in
  number, so they are refused;
- an IRAP picture with ``no_output_of_prior_pics_flag`` makes the decoder discard the
  pictures waiting for output (``drops_waiting``): harmless only as the first picture;
- FFmpeg's ``skip_frame=NONREF`` drops the sub-layer non-reference types (``_N``), which
  pictures of a higher sub-layer (TemporalId) may still reference; the index skips them
  only at the stream's top sub-layer;
- a PPS with ``output_flag_present_flag`` lets a slice hide its picture, several layers
  (``nuh_layer_id`` > 0) are several pictures a packet: refused, as are reserved types.

Packets come length-prefixed (MP4 / MKV ``hvcC`` extradata: its length size and
parameter sets, told apart from Annex B as FFmpeg does) or in Annex B (start codes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from . import h264

#: nal_unit_type values (H.265 Table 7-1)
IDR_W_RADL, IDR_N_LP, CRA = 19, 20, 21
VPS, SPS, PPS = 32, 33, 34
PARAMETER_SETS = (VPS, SPS, PPS)
PICTURES = frozenset(range(0, 10)) | {IDR_W_RADL, IDR_N_LP, CRA}  # trailing, TSA, STSA, RADL, RASL, IDR, CRA
IRAP = frozenset(range(16, 24))
SUBLAYER_NONREF = frozenset((0, 2, 4, 6, 8))  # TRAIL_N, TSA_N, STSA_N, RADL_N, RASL_N
#: non-VCL types the decoder takes without changing which pictures it outputs: access unit
#: delimiter, filler, SEI, and the unspecified 48-63 (62: Dolby Vision metadata)
PASSIVE = frozenset((35, 38, 39, 40)) | frozenset(range(48, 64))


@dataclass(frozen=True)
class AccessUnit:
    """One packet's NAL units as far as seeking cares."""

    pictures: int  # slice segments with first_slice_segment_in_pic_flag (a picture starts)
    idr: bool  # its slices are IDR slices
    parameter_sets: frozenset  # the VPS / SPS / PPS NAL units it carries, as bytes
    temporal_id: int  # TemporalId of its slices
    sublayer_nonref: bool  # a sub-layer non-reference picture (dropped under NONREF)
    drops_waiting: bool  # an IRAP picture whose decode discards the pictures waiting for output
    partitioned: ClassVar[bool] = False  # HEVC has no data partitioning


class Format:
    """How packets of one stream split into NAL units."""

    def __init__(self, extradata: bytes | None):
        data = bytes(extradata or b"")
        self.length_size = 0  # 0: Annex B
        units: list | None = []
        if len(data) >= 23 and (data[0] == 1 or (data[0] == 0 and (data[1] or data[2] > 1))):
            self.length_size = (data[21] & 3) + 1  # lengthSizeMinusOne
            units = _hvcc_units(data)
        elif data:
            units = [n for n in h264.nal_units(data, 0) or () if len(n)]  # Annex B: never None
        sets = [n for n in units or () if _kind(n) in PARAMETER_SETS]
        #: False: the extradata is cut short or holds what the index refuses (every packet then None)
        self.usable = units is not None and all(_plain_parameter_set(n) for n in sets)
        self.parameter_sets = frozenset(bytes(n) for n in sets)

    def nal_units(self, data) -> list | None:
        return h264.nal_units(data, self.length_size)

    def access_unit(self, data) -> AccessUnit | None:
        """The packet's facts, or None when it holds what the index does not vouch for."""
        nals = self.nal_units(data) if self.usable else None
        if nals is None:
            return None
        slices, sets = [], []
        for nal in nals:
            if not len(nal) and not self.length_size:
                continue  # Annex B: zero bytes between start codes
            header = _header(nal)
            if header is None:
                return None
            kind, temporal_id = header
            if kind in PICTURES:
                if len(nal) < 3:
                    return None
                slices.append((kind, temporal_id, nal[2]))
            elif kind in PARAMETER_SETS and _plain_parameter_set(nal):
                sets.append(bytes(nal))
            elif kind not in PASSIVE:
                return None  # BLA, reserved types, end of sequence / bitstream, odd parameter sets
        return _picture(slices, frozenset(sets))


def _picture(slices: list, sets: frozenset) -> AccessUnit | None:
    """The access unit of these slice segments: one kind and sub-layer, starting a picture."""
    if not slices:
        return AccessUnit(0, False, sets, 0, False, False)
    kinds, sublayers = {k for k, _, _ in slices}, {t for _, t, _ in slices}
    kind, temporal_id, first = slices[0]
    if len(kinds) > 1 or len(sublayers) > 1 or not first >> 7:
        return None  # a picture's slices share type and TemporalId, and its first segment leads
    pictures = sum(b >> 7 for _, _, b in slices)
    drops = kind in IRAP and bool(first >> 6 & 1)  # no_output_of_prior_pics_flag follows the first bit
    return AccessUnit(pictures, kind in (IDR_W_RADL, IDR_N_LP), sets, temporal_id, kind in SUBLAYER_NONREF, drops)


def _kind(nal) -> int:
    return nal[0] >> 1 & 0x3F if len(nal) else -1


def _header(nal) -> tuple[int, int] | None:
    """(nal_unit_type, TemporalId) of a base-layer NAL unit, or None (forbidden bit set,
    another layer, TemporalId + 1 of 0, shorter than its header)."""
    if len(nal) < 2 or nal[0] & 0x80 or (nal[0] & 1) or nal[1] >> 3 or not nal[1] & 7:
        return None
    return nal[0] >> 1 & 0x3F, (nal[1] & 7) - 1


def _plain_parameter_set(nal) -> bool:
    """A base-layer parameter set that hides no picture: a PPS must not let slices set
    pic_output_flag (``output_flag_present_flag``, its fourth syntax element)."""
    header = _header(nal)
    if header is None or len(nal) < 3:
        return False
    if header[0] != PPS:
        return True
    bits = _Bits(re.sub(b"\0\0\3", b"\0\0", bytes(nal[2:18])))
    return bits.ue() is not None and bits.ue() is not None and bits.u(1) is not None and bits.u(1) == 0


class _Bits:
    """Reads bits MSB first from RBSP bytes; None once past the end."""

    def __init__(self, data: bytes):
        self.value, self.left = int.from_bytes(data, "big"), 8 * len(data)

    def u(self, n: int) -> int | None:
        if n > self.left:
            return None
        self.left -= n
        return self.value >> self.left & ((1 << n) - 1)

    def ue(self) -> int | None:
        zeros = 0
        while (bit := self.u(1)) == 0:
            zeros += 1
        rest = self.u(zeros) if bit is not None and zeros <= 31 else None
        return None if rest is None else (1 << zeros) - 1 + rest


def _hvcc_units(data: bytes) -> list | None:
    """The NAL units an ``hvcC`` record carries (ISO/IEC 14496-15 8.3.3.1: 23 bytes, then
    arrays of 16-bit-length NAL units), or None when it is cut short."""
    out, i, n = [], 23, len(data)
    for _ in range(data[22]):
        if i + 3 > n:
            return None
        count = int.from_bytes(data[i + 1:i + 3], "big")
        i += 3
        for _ in range(count):
            length = int.from_bytes(data[i:i + 2], "big") if i + 2 <= n else n
            if i + 2 + length > n:
                return None
            out.append(data[i + 2:i + 2 + length])
            i += 2 + length
    return out
