"""Serialized responses whose pixel tensor bytes are copied once.

Putting a multi-megabyte tensor through protobuf copies it three or four times (numpy ->
bytes -> message arena -> a serialized buffer grown by doubling), all on fresh pages and
under the GIL: ~55 ms for the 22.5 MB of a 1280x720 Qwen2-VL payload. Instead the
response is serialized without the pixel bytes and followed by one more encoded fragment
that holds only ``<path>.data``. The encoding spec has parsers merge repeated occurrences
of a singular message field, so every receiver (upb, C++, prost) sees exactly the message
with the bytes in place, and the bytes are copied once, by ``bytes.join``, which releases
the GIL for large copies.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from . import assemble as asm
from .carriers import PreprocessOutput

_LEN = 2  # wire type of bytes, strings and messages


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _path_numbers(descriptor, path: tuple[str, ...]) -> list[int]:
    """Field numbers along ``path``: singular message fields, then one bytes field."""
    numbers = []
    for i, name in enumerate(path):
        field = descriptor.fields_by_name[name]
        last = i == len(path) - 1
        want = FieldDescriptor.TYPE_BYTES if last else FieldDescriptor.TYPE_MESSAGE
        if field.type != want or field.is_repeated:
            raise ValueError(f"{'.'.join(path[: i + 1])} is not a singular {'bytes' if last else 'message'} field")
        numbers.append(field.number)
        descriptor = field.message_type
    return numbers


def serialize_with_bytes(msg: Message, path: tuple[str, ...], data) -> bytes:
    """``msg`` serialized as if ``msg.<path>`` (a bytes field, left empty in ``msg``) held
    ``data`` (any buffer), copying ``data`` once."""
    view = memoryview(data).cast("B")
    head = msg.SerializeToString()
    if not view.nbytes:
        return head
    size = view.nbytes
    headers = []
    for number in reversed(_path_numbers(msg.DESCRIPTOR, path)):
        h = _varint(number << 3 | _LEN) + _varint(size)
        headers.append(h)
        size += len(h)
    return b"".join([head, *reversed(headers), view])


def with_payload(resp: Message, out: PreprocessOutput, backend, field_layout) -> bytes:
    """``resp`` (a response with a ``payload`` field) serialized with the payload for
    ``backend`` in it."""
    asm.assemble(out, backend, field_layout, into=resp.payload, pixel_bytes=False)
    return serialize_payload(resp, out)


def serialize_payload(resp: Message, out: PreprocessOutput) -> bytes:
    """``resp``, whose payload was assembled with ``pixel_bytes=False``, serialized with
    the pixel bytes of ``out`` in it."""
    which = resp.payload.WhichOneof("mm_inputs")
    if which in ("sglang", "vllm"):
        return serialize_with_bytes(resp, ("payload", which, "pixel_values", "data"), asm.pixel_wire_array(out))
    return resp.SerializeToString()


def serialize_response(resp) -> bytes:
    """The servicer's response serializer: messages, or bytes serialized already."""
    return resp if isinstance(resp, bytes) else resp.SerializeToString()

