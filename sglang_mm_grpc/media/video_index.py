"""The video stream's packets read without decoding: which frame each packet is, and
where a decode may start, so that only the frames sampling needs are decoded.

HF's PyAV loader numbers frames in the order the decoder returns them, decoding from the
first packet. The decoder returns one frame per picture in presentation (pts) order, so
when every packet is exactly one picture with its own pts, frame ``i`` is the packet of
the ``i``-th smallest pts. A decode from an IDR picture gives the same pixels as one from
the start when nothing after it uses what came before (IDR), the parameter sets are the
ones already known, and no frame before it in decode order is shown after it. Where any
of that cannot be shown from the packets, ``build`` returns None and the caller decodes
every frame in order, as HF does.

H.264 and HEVC are indexed: one builder here, each codec's packet classifier beside it
(``h264``, ``hevc``: a packet's pictures, IDR or not, parameter sets, and for HEVC its
sub-layer). Frames not needed are fed with ``skip_frame=NONREF`` where the picture the
decoder then drops is one nothing references (``StreamIndex.skippable``): every H.264
packet; HEVC's sub-layer non-reference pictures only at the stream's top sub-layer, since
a higher one may reference them. Other codecs decode in order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from . import h264, hevc

class AccessUnit(Protocol):
    """What the index reads of a packet (``h264.AccessUnit``, ``hevc.AccessUnit``)."""

    @property
    def pictures(self) -> int: ...
    @property
    def idr(self) -> bool: ...
    @property
    def partitioned(self) -> bool: ...
    @property
    def parameter_sets(self) -> frozenset: ...
    @property
    def temporal_id(self) -> int: ...
    @property
    def sublayer_nonref(self) -> bool: ...
    @property
    def drops_waiting(self) -> bool: ...


class Parser(Protocol):
    """How a stream's packets are read (``h264.Format``, ``hevc.Format``)."""

    @property
    def parameter_sets(self) -> frozenset: ...
    def access_unit(self, data: Any) -> AccessUnit | None: ...


#: codec name -> how its packets are read (``Format(extradata).access_unit(packet)``)
PARSERS: dict[str, Callable[[bytes | None], Parser]] = {"h264": h264.Format, "hevc": hevc.Format}
INDEXED_CODECS = tuple(PARSERS)
#: Containers whose packets carry presentation times (MP4 / QuickTime: composition
#: offsets; Matroska: block times); AVI and raw streams number packets in decode order.
TRUE_PTS_FORMATS = ("mov", "mp4", "matroska")


@dataclass(frozen=True)
class StreamIndex:
    pts: np.ndarray  # int64 [packets], decode order
    by_frame: np.ndarray  # int64 [frames]: the decode position of frame i (frames in pts order)
    entries: np.ndarray  # int64, ascending: decode positions a decode may start at (0 first)
    skippable: np.ndarray  # bool [packets], decode order: may be fed with skip_frame NONREF when not wanted

    @property
    def frames(self) -> int:
        return len(self.by_frame)

    def runs(self, wanted) -> list[tuple[int, int]]:
        """(first, last) decode positions (inclusive) to feed for the frames ``wanted``:
        from the entry before each needed packet to the last needed one after it, runs that
        meet joined (the decoder goes on without a restart)."""
        positions = self.by_frame[np.asarray(sorted(set(int(i) for i in wanted)), np.int64)]
        segment = np.searchsorted(self.entries, positions, side="right") - 1
        out: list[tuple[int, int]] = []
        for s in np.unique(segment):
            first, last = int(self.entries[s]), int(positions[segment == s].max())
            if out and out[-1][1] + 1 >= first:
                out[-1] = (out[-1][0], last)
            else:
                out.append((first, last))
        return out


class Counter:
    """The packet limit and the two time limits, checked as packets are read: the decode
    budget (``seconds`` of decoding, not counting the time the caller holds a frame, so
    the pixel work done between frames and a first call's kernel compilation do not use
    it up) and the request's ``deadline`` (a ``time.monotonic()`` value, or None), which
    counts everything."""

    def __init__(self, max_packets: int, seconds: float, deadline: float | None, exhausted, late):
        self.max_packets, self.exhausted, self.late = max_packets, exhausted, late
        self.end = time.monotonic() + seconds
        self.deadline = deadline
        self.packets = 0

    def extend(self, seconds: float) -> None:
        """Move the decode budget's end by time not spent decoding."""
        self.end += seconds

    def packet(self) -> None:
        self.packets += 1
        if self.packets > self.max_packets:
            raise self.exhausted()
        now = time.monotonic()
        if now > self.end or (self.deadline is not None and now > self.deadline):
            raise self.late()


def build(container, stream, counter: Counter) -> StreamIndex | None:
    """The index of ``stream`` (demuxed to its end, nothing decoded), or None when the
    packets do not show that frames can be found and decoded apart (decode in order)."""
    parser = PARSERS.get(stream.codec_context.name or "")
    if parser is None or not _true_pts(container):
        return None
    fmt = parser(stream.codec_context.extradata)
    pts: list[int] = []
    idr: list[bool] = []
    sublayer: list[int] = []  # TemporalId
    nonref: list[bool] = []  # a sub-layer non-reference picture
    known = set(fmt.parameter_sets)
    new_sets = False
    ended = False
    for packet in container.demux(stream):
        counter.packet()
        if packet.size == 0 and packet.pts is None:
            ended = True  # the demuxer's closing empty packet
            continue
        au = fmt.access_unit(packet) if not ended and packet.pts is not None else None
        if au is None or au.pictures != 1 or au.partitioned or (au.drops_waiting if pts else not au.idr):
            return None
        if pts:
            new_sets = new_sets or not au.parameter_sets <= known
        else:
            known |= au.parameter_sets
        pts.append(int(packet.pts))
        idr.append(au.idr)
        sublayer.append(au.temporal_id)
        nonref.append(au.sublayer_nonref)
    skippable = ~np.asarray(nonref, bool) | (np.asarray(sublayer, np.int64) == max(sublayer, default=0))
    return _index(np.asarray(pts, np.int64), np.asarray(idr, bool), new_sets, skippable)


def _true_pts(container) -> bool:
    return any(name in TRUE_PTS_FORMATS for name in (container.format.name or "").split(","))


def _index(pts: np.ndarray, idr: np.ndarray, new_sets: bool, skippable: np.ndarray) -> StreamIndex | None:
    if not len(pts) or len(np.unique(pts)) != len(pts):
        return None
    order = np.argsort(pts, kind="stable")
    entries = np.flatnonzero(idr) if not new_sets else np.zeros(1, np.int64)
    # an entry is exact only if everything before it in decode order is shown before it
    before = np.maximum.accumulate(pts)
    after = np.minimum.accumulate(pts[::-1])[::-1]
    entries = np.asarray([e for e in entries if e == 0 or before[e - 1] < after[e]], np.int64)
    if not len(entries) or entries[0] != 0:
        return None
    return StreamIndex(pts, order.astype(np.int64), entries, skippable)
