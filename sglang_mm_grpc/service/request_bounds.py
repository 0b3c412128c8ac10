"""A PreprocessRequest's token ids counted from its bytes, before protobuf parses them.

Parsing 25M ids costs the server hundreds of MB before any handler could look at their
number. So the service's deserializer counts them first: a message shorter than the
limit cannot hold more ids than the limit and is parsed as it is; a longer one has its
top-level fields walked (a few per request: ids, images, options), the ids of the packed
``input_ids`` counted as their varints' last bytes (numpy, no parse), and, over the
limit, only the other fields are parsed. The servicer then refuses the call
(RESOURCE_EXHAUSTED) from the count, without the ids ever existing as a list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.errors import Code, PreprocessError

_IDS_FIELD = pb.PreprocessRequest.DESCRIPTOR.fields_by_name["input_ids"].number
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


@dataclass(frozen=True)
class TooManyIds:
    """A request whose ``input_ids`` hold ``count`` ids, over ``limit``: its other fields."""

    request: pb.PreprocessRequest
    count: int
    limit: int

    def refusal(self) -> PreprocessError:
        return PreprocessError(Code.RESOURCE_EXHAUSTED, f"input_ids holds {self.count} token ids, over the limit "
                               f"of {self.limit} (serve --max-input-ids); nothing was read")


def deserializer(limit: int):
    """PreprocessRequest.FromString, or a ``TooManyIds`` for a request over ``limit`` ids."""

    def parse(data: bytes):
        if len(data) <= limit:  # every id takes at least one byte
            return pb.PreprocessRequest.FromString(data)
        count, rest = _count_ids(memoryview(data), limit)
        if count <= limit:
            return pb.PreprocessRequest.FromString(data)
        return TooManyIds(pb.PreprocessRequest.FromString(rest), count, limit)

    return parse


def unwrap(request) -> tuple[pb.PreprocessRequest, PreprocessError | None]:
    """(the request, the refusal its ids earn, if any)."""
    if isinstance(request, TooManyIds):
        return request.request, request.refusal()
    return request, None


def _count_ids(data: memoryview, limit: int) -> tuple[int, bytes]:
    """(ids in ``data``'s input_ids, counted up to past ``limit``; the other fields' bytes).
    Malformed bytes end the walk: the parse that follows reports them."""
    count, pos, end, kept = 0, 0, len(data), []
    raw = np.frombuffer(data, np.uint8)
    while pos < end and count <= limit:
        start = pos
        if (read := _varint(data, pos)) is None:
            break
        key, pos = read
        number, kind = key >> 3, key & 7
        if kind == _VARINT:
            if (read := _varint(data, pos)) is None:
                break
            _, pos = read
            if number == _IDS_FIELD:
                count += 1
                continue
        elif kind == _LEN:
            if (read := _varint(data, pos)) is None:
                break
            length, pos = read
            if pos + length > end:
                break
            if number == _IDS_FIELD:
                count += int(np.count_nonzero(raw[pos:pos + length] < 0x80))
                pos += length
                continue
            pos += length
        elif kind in (_I64, _I32):
            pos += 8 if kind == _I64 else 4
        else:
            break
        kept.append(data[start:pos])
    return count, b"".join(kept)


def _varint(data: memoryview, pos: int) -> tuple[int, int] | None:
    """(the varint at ``pos``, the position after it), or None where none ends."""
    value, shift = 0, 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return None
