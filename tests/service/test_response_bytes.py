"""Responses serialized with their tensors written once (``wire.serialize``: the payload
without its large tensors, then a fragment that carries them, converted as they are
copied) parse to exactly the message protobuf builds the ordinary way, in upb and in
protobuf's pure-Python parser, for every backend and every wire dtype."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import imagegen
from service_support import item_rows, prompt, wire_array
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.wire import assemble as asm, tensors, serialize as wire
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

BACKENDS = ("sglang", "vllm", "trtllm", "tokenspeed")


@pytest.fixture(scope="module")
def outputs():
    """Every preset's output for two images of different sizes."""
    images = [imagegen.jpeg(200, 300, seed=1), imagegen.jpeg(260, 120, seed=2)]
    out = {}
    for name in imagegen.image_presets():
        pp = Preprocessor.from_model(name, cache_bytes=0)
        out[name] = (pp, pp.preprocess(images, prompt(pp, 2)))
    return out


def ordinary(out, backend, layout, **options) -> pb.BackendPayload:
    """The payload built the ordinary way: every tensor's bytes set in the message."""
    dtype = asm.WireOptions(**options).pixel_dtype or asm.DEFAULT_PIXEL_DTYPE[backend]
    a = asm.assemble(out, backend, layout, options=asm.WireOptions(**options))
    msg = pb.BackendPayload()
    msg.CopyFrom(a.payload)
    if backend in ("sglang", "vllm"):
        field = "data" if backend == "sglang" else "inline"
        setattr(getattr(msg, backend).pixel_values, field, wire_array(out.pixel_values, dtype).tobytes())
    elif backend == "tokenspeed":
        # the items' fields are checked in test_service_assemble; here: their tensor bytes
        whole = a.message().tokenspeed.items
        for i in range(len(out.images)):
            item = msg.tokenspeed.items.add()
            item.CopyFrom(whole[i])
            rows = item_rows(out, layout, "pixel_values", out.pixel_values, i)
            item.encoder_input.inline = wire_array(rows, dtype).tobytes()
    return msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_assemble_response_equals_the_ordinary_message(outputs, backend):
    for name, (pp, out) in outputs.items():
        try:
            a = asm.assemble(out, backend, pp.field_layout)
        except PreprocessError as e:  # vLLM refuses padded Pixtral batches (test_service_assemble)
            assert backend == "vllm" and e.code == Code.FAILED_PRECONDITION, name
            continue
        resp = pb.AssembleResponse()
        resp.payload.CopyFrom(a.payload)
        data = wire.serialize(resp, a.tail)
        assert pb.AssembleResponse.FromString(data) == pb.AssembleResponse(payload=ordinary(out, backend, pp.field_layout)), name
        if backend in ("sglang", "vllm"):
            assert len(data) > out.pixel_values.nbytes


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("backend", ["vllm", "tokenspeed"])
def test_narrow_dtypes_carry_half_the_bytes(outputs, backend, dtype):
    pp, out = outputs["Qwen/Qwen2-VL-7B-Instruct"]
    a = asm.assemble(out, backend, pp.field_layout, options=asm.WireOptions(pixel_dtype=dtype))
    resp = pb.AssembleResponse()
    resp.payload.CopyFrom(a.payload)
    data = wire.serialize(resp, a.tail)
    got = pb.AssembleResponse.FromString(data)
    assert got == pb.AssembleResponse(payload=ordinary(out, backend, pp.field_layout, pixel_dtype=dtype))
    assert out.pixel_values.nbytes // 2 < len(data) < out.pixel_values.nbytes // 2 + 4096


def test_preprocess_response_keeps_its_other_fields(outputs):
    pp, out = outputs["Qwen/Qwen2-VL-7B-Instruct"]
    resp = pb.PreprocessResponse(request_id="r1", handle="h1", input_ids=[5, 6, 7])
    resp.timings.total_ms = 3.5
    expected = pb.PreprocessResponse()
    expected.CopyFrom(resp)
    expected.payload.CopyFrom(ordinary(out, "vllm", pp.field_layout))
    a = asm.assemble(out, "vllm", pp.field_layout, into=resp.payload)
    got = pb.PreprocessResponse.FromString(wire.serialize(resp, a.tail))
    assert got == expected
    assert np.array_equal(tensors.to_array(got.payload.vllm.pixel_values), out.pixel_values)


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
    for backend in ("sglang", "vllm", "tokenspeed"):
        a = asm.assemble(out, backend, pp.field_layout)
        resp = pb.AssembleResponse()
        resp.payload.CopyFrom(a.payload)
        path.write_bytes(wire.serialize(resp, a.tail))
        expected = pb.AssembleResponse(payload=ordinary(out, backend, pp.field_layout))
        env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
        res = subprocess.run([sys.executable, "-c", _PURE_PYTHON_PARSE, str(path)], env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == hashlib.sha256(expected.SerializeToString(deterministic=True)).hexdigest(), backend


def test_parts_and_holes():
    msg = pb.AssembleResponse()
    msg.payload.vllm.pixel_values.dtype = "float32"
    path = wire.field_path(pb.BackendPayload, ("vllm", "pixel_values", "inline"))
    empty = wire.serialize(msg, [wire.nest(path, wire.Hole(np.zeros(0, np.float32)))])
    got = pb.AssembleResponse.FromString(empty)
    assert got.payload.vllm.pixel_values.WhichOneof("payload") == "inline"  # set, though empty
    big = np.arange(70000, dtype="<f4")  # a length that needs a 3-byte varint
    got = pb.AssembleResponse.FromString(wire.serialize(msg, [wire.nest(path, wire.Hole(big))]))
    assert got.payload.vllm.pixel_values.inline == big.tobytes() and got.payload.vllm.pixel_values.dtype == "float32"
    with pytest.raises(ValueError, match="not a singular message"):
        wire.field_path(pb.BackendPayload, ("vllm", "mm_placeholders", "inline"))
    with pytest.raises(ValueError, match="not a singular bytes"):
        wire.field_path(pb.BackendPayload, ("vllm", "pixel_values", "dtype"))
    assert wire.encode([b"ab", [b"c", wire.Hole(np.array([1.0], np.float32))]]) == b"abc" + np.float32(1).tobytes()


def test_send_limit_refused_before_anything_is_copied(outputs):
    pp, out = outputs["Qwen/Qwen2-VL-7B-Instruct"]
    a = asm.assemble(out, "vllm", pp.field_layout)
    resp = pb.AssembleResponse()
    resp.payload.CopyFrom(a.payload)
    limit = out.pixel_values.nbytes // 2
    with pytest.raises(PreprocessError) as e:
        wire.serialize(resp, a.tail, max_bytes=limit)
    assert e.value.code == Code.RESOURCE_EXHAUSTED
    size = int(e.value.message.split("would be ")[1].split(" bytes")[0])
    assert size > out.pixel_values.nbytes and str(limit) in e.value.message
    for remedy in ("TENSOR_TRANSPORT_SHM", "WIRE_DTYPE_BFLOAT16", "--max-send-bytes"):
        assert remedy in e.value.message


def test_serialize_response_passes_bytes_through():
    assert wire.serialize_response(b"\x08\x01") == b"\x08\x01"
    assert wire.serialize_response(pb.ReleaseResponse(released=True)) == pb.ReleaseResponse(released=True).SerializeToString()
