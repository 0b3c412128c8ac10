"""Responses serialized with the pixel bytes appended (``wire``) parse to exactly the
message protobuf builds the ordinary way, in upb and in protobuf's pure-Python parser."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import imagegen
from service_support import prompt
from sglang_mm_grpc import Preprocessor, assemble as asm, config, wire
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

BACKENDS = ("sglang", "vllm", "trtllm")


@pytest.fixture(scope="module")
def outputs():
    """Every preset's output for two images of different sizes."""
    images = [imagegen.jpeg(200, 300, seed=1), imagegen.jpeg(260, 120, seed=2)]
    out = {}
    for name in config.preset_names():
        pp = Preprocessor.from_model(name, cache_bytes=0)
        out[name] = (pp, pp.preprocess(images, prompt(pp, 2)))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_assemble_response_equals_the_ordinary_message(outputs, backend):
    for name, (pp, out) in outputs.items():
        data = wire.with_payload(pb.AssembleResponse(), out, backend, pp.field_layout)
        expected = pb.AssembleResponse(payload=asm.assemble(out, backend, pp.field_layout))
        assert pb.AssembleResponse.FromString(data) == expected, name
        if backend != "trtllm":
            assert len(data) > out.pixel_values.nbytes


def test_preprocess_response_keeps_its_other_fields(outputs):
    pp, out = outputs["Qwen/Qwen2-VL-7B-Instruct"]
    resp = pb.PreprocessResponse(request_id="r1", handle="h1", input_ids=[5, 6, 7])
    resp.timings.total_ms = 3.5
    expected = pb.PreprocessResponse()
    expected.CopyFrom(resp)
    asm.assemble(out, "vllm", pp.field_layout, into=expected.payload)
    got = pb.PreprocessResponse.FromString(wire.with_payload(resp, out, "vllm", pp.field_layout))
    assert got == expected
    assert np.array_equal(
        np.frombuffer(got.payload.vllm.pixel_values.data, "<f4").reshape(tuple(got.payload.vllm.pixel_values.shape)),
        out.pixel_values,
    )


_PURE_PYTHON_PARSE = """
import hashlib, sys
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from google.protobuf.internal import api_implementation
assert api_implementation.Type() == "python", api_implementation.Type()
msg = pb.AssembleResponse.FromString(open(sys.argv[1], "rb").read())
print(hashlib.sha256(msg.SerializeToString(deterministic=True)).hexdigest())
"""


def test_pure_python_parser_reads_the_same_message(outputs, tmp_path):
    import hashlib

    pp, out = outputs["llava-hf/llava-v1.6-mistral-7b-hf"]
    path = tmp_path / "resp.bin"
    for backend in ("sglang", "vllm"):
        path.write_bytes(wire.with_payload(pb.AssembleResponse(), out, backend, pp.field_layout))
        expected = pb.AssembleResponse(payload=asm.assemble(out, backend, pp.field_layout))
        env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
        res = subprocess.run([sys.executable, "-c", _PURE_PYTHON_PARSE, str(path)], env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == hashlib.sha256(expected.SerializeToString(deterministic=True)).hexdigest()


def test_serialize_with_bytes_rules():
    msg = pb.AssembleResponse()
    msg.payload.vllm.pixel_values.dtype = "float32"
    assert wire.serialize_with_bytes(msg, ("payload", "vllm", "pixel_values", "data"), b"") == msg.SerializeToString()
    big = np.arange(70000, dtype="<f4")  # a length that needs a 3-byte varint
    got = pb.AssembleResponse.FromString(wire.serialize_with_bytes(msg, ("payload", "vllm", "pixel_values", "data"), big))
    assert got.payload.vllm.pixel_values.data == big.tobytes() and got.payload.vllm.pixel_values.dtype == "float32"
    with pytest.raises(ValueError, match="not a singular message"):
        wire.serialize_with_bytes(msg, ("payload", "vllm", "mm_placeholders", "data"), b"x")
    with pytest.raises(ValueError, match="not a singular bytes"):
        wire.serialize_with_bytes(msg, ("payload", "vllm", "pixel_values", "dtype"), b"x")


def test_serialize_response_passes_bytes_through():
    assert wire.serialize_response(b"\x08\x01") == b"\x08\x01"
    assert wire.serialize_response(pb.ReleaseResponse(released=True)) == pb.ReleaseResponse(released=True).SerializeToString()
