"""Serialized responses whose tensor bytes are written once, converted as they are copied.

Putting a multi-megabyte tensor through protobuf copies it three or four times (numpy ->
bytes -> message arena -> a serialized buffer grown by doubling), all on fresh pages and
under the GIL: ~55 ms for the 22.5 MB of a 1280x720 Qwen2-VL payload. Instead the
response is serialized without its large tensors and followed by one more encoded
fragment of the ``payload`` field that holds only them (``Hole``s). The encoding spec
has parsers merge repeated occurrences of a singular message field (and take the last
member of a oneof), so every receiver (upb, C++, prost, the pure-Python parser) sees
exactly the message with the bytes in place. A repeated field cannot be merged that
way, so TokenSpeed's items travel whole in the fragment, each with its encoder input
appended inside it.

The final ``bytes`` object is allocated once, at its final size, and filled in place: the
small parts are copied, and each Hole is written by a kernel (``kernels.wirecast``) that
converts float32 to the wire dtype (float32, bfloat16, float16) in the same pass, with
the GIL released. That is the tensor's one copy on its way to the wire.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from ..core.errors import Code, PreprocessError
from ..kernels.wirecast import WIDTHS, cast_into

_LEN = 2  # wire type of bytes, strings and messages

__all__ = ["WIDTHS", "Hole", "cast_into", "encode", "field", "field_path", "nest", "parts_nbytes",
           "serialize", "serialize_response"]


@dataclass(frozen=True)
class Hole:
    """A float32 tensor to be written as ``dtype`` bytes into the encoded message."""

    array: np.ndarray
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        return int(self.array.size) * WIDTHS[self.dtype]


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def parts_nbytes(parts) -> int:
    return sum(p.nbytes if isinstance(p, Hole) else len(p) for p in _flatten(parts, []))


def field(number: int, parts) -> list:
    """A length-delimited field ``number`` whose value is ``parts`` (bytes and Holes)."""
    parts = list(parts) if isinstance(parts, (list, tuple)) else [parts]
    return [varint(number << 3 | _LEN) + varint(parts_nbytes(parts)), *parts]


def nest(numbers: tuple[int, ...], part) -> list:
    """``part`` inside the chain of fields ``numbers`` (outermost first)."""
    parts = part if isinstance(part, list) else [part]
    for number in reversed(numbers):
        parts = field(number, parts)
    return parts


def field_path(message_cls, path: tuple[str, ...]) -> tuple[int, ...]:
    """Field numbers along ``path`` of ``message_cls``: singular message fields, then one
    bytes field (ValueError otherwise)."""
    descriptor = message_cls.DESCRIPTOR
    numbers = []
    for i, name in enumerate(path):
        fd = descriptor.fields_by_name[name]
        last = i == len(path) - 1
        want = FieldDescriptor.TYPE_BYTES if last else FieldDescriptor.TYPE_MESSAGE
        if fd.type != want or fd.is_repeated:
            raise ValueError(f"{'.'.join(path[: i + 1])} is not a singular {'bytes' if last else 'message'} field")
        numbers.append(fd.number)
        descriptor = fd.message_type
    return tuple(numbers)


def _flatten(parts, out: list) -> list:
    for p in parts:
        if isinstance(p, (list, tuple)):
            _flatten(p, out)
        else:
            out.append(p)
    return out


_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_bytes_ptr = ctypes.pythonapi.PyBytes_AsString
_bytes_ptr.restype = ctypes.c_void_p
_bytes_ptr.argtypes = (ctypes.py_object,)


def _fresh_bytes(n: int) -> tuple[bytes, np.ndarray]:
    """A new bytes object of ``n`` bytes and a writable view of them. Written only before
    the object is handed to anyone (CPython's PyBytes_FromStringAndSize(NULL, n) contract)."""
    b = _new_bytes(None, n)
    if n == 0:
        return b, np.zeros(0, np.uint8)
    return b, np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(_bytes_ptr(b)))


def encode(parts) -> bytes:
    """The concatenation of ``parts`` (bytes, Holes, nested lists), each Hole written by
    the conversion kernel straight into the result."""
    flat = _flatten(parts, [])
    total = parts_nbytes(flat)
    out, view = _fresh_bytes(total)
    pos = 0
    for p in flat:
        if isinstance(p, Hole):
            n = p.nbytes
            cast_into(p.array, view[pos : pos + n], p.dtype)
        else:
            n = len(p)
            view[pos : pos + n] = np.frombuffer(p, np.uint8) if n else view[pos:pos]
        pos += n
    return out


def serialize(resp: Message, tail, *, max_bytes: int | None = None) -> bytes:
    """``resp`` (whose ``payload`` field was assembled without its large tensors) followed by
    ``tail`` (parts relative to the BackendPayload message), as one bytes object. Refused
    with RESOURCE_EXHAUSTED, before anything is copied, when it would exceed ``max_bytes``."""
    head = resp.SerializeToString()
    parts = [head]
    if tail:
        number = resp.DESCRIPTOR.fields_by_name["payload"].number
        parts.extend(field(number, list(tail)))
    total = parts_nbytes(_flatten(parts, []))
    if max_bytes is not None and total > max_bytes:
        raise PreprocessError(Code.RESOURCE_EXHAUSTED, too_large(total, max_bytes))
    return encode(parts) if tail else head


def too_large(nbytes: int, limit: int) -> str:
    return (
        f"the response would be {nbytes} bytes, over this server's send limit of {limit} bytes "
        f"(serve --max-send-bytes); use TENSOR_TRANSPORT_SHM or AUTO with a co-located vLLM or TokenSpeed worker, "
        f"WIRE_DTYPE_BFLOAT16 (half the bytes, where the backend takes it), fewer or smaller images per request, "
        f"or raise --max-send-bytes (and the client's receive limit)"
    )


def serialize_response(resp) -> bytes:
    """The servicer's response serializer: messages, or bytes serialized already."""
    return resp if isinstance(resp, bytes) else resp.SerializeToString()
