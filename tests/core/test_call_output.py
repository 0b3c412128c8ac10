"""``call`` prints a tensor's data as its size and hash, small bytes values as they are,
and every other field unchanged; on real messages of the service's protos."""

from __future__ import annotations

import base64

from blake3 import blake3
from google.protobuf import json_format

from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc.cli.call import SHOWN_BYTES, abbreviate


def test_long_bytes_become_size_and_hash_and_the_rest_stays():
    big, small = bytes(range(256)) * 4, b"x" * SHOWN_BYTES
    message = pb.PreprocessRequest(model="m", input_ids=[1, 2],
                                   images=[pb.MediaItem(data=big), pb.MediaItem(data=small)])
    shown = json_format.MessageToDict(message, preserving_proto_field_name=True)
    abbreviate(message, shown)
    assert shown["images"][0]["data"] == f"<{len(big)} bytes, blake3 {blake3(big).hexdigest()[:16]}>"
    assert shown["images"][1]["data"] == base64.b64encode(small).decode()
    assert shown["model"] == "m" and shown["input_ids"] == [1, 2]
