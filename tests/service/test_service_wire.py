"""The payload bytes parse with the gateway's own message classes (smg-grpc-proto), with
nothing unknown left over, and every field lands where the real backend reads it.

The bytes checked are the server's response as it crossed the wire (the payload written
without its tensors plus the fragment that carries them), taken apart again with the
upstream classes alone."""

from __future__ import annotations

import blake3
import grpc
import numpy as np
import pytest
from google.protobuf import unknown_fields
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sg
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as ts
from smg_grpc_proto.generated import trtllm_service_pb2 as tr
from smg_grpc_proto.generated import vllm_engine_pb2 as vl

import imagegen
from service_support import QWEN2, prompt
from sglang_mm_grpc.wire import tensors
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

RAWS = [imagegen.jpeg(120, 200, seed=31), imagegen.png(50, 70, seed=32)]
UPSTREAM = {"sglang": sg.MultimodalInputs, "vllm": vl.MultimodalInputs, "trtllm": tr.MultimodalInput,
            "tokenspeed": ts.MultimodalInputs}


def assert_no_unknown_fields(msg, path="msg"):
    assert len(unknown_fields.UnknownFieldSet(msg)) == 0, f"{path} has fields the backend does not know"
    for fd, value in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        if fd.message_type.GetOptions().map_entry:
            items = value.values() if fd.message_type.fields_by_name["value"].type == fd.TYPE_MESSAGE else ()
        elif fd.is_repeated:
            items = value
        else:
            items = [value]
        for i, sub in enumerate(items):
            assert_no_unknown_fields(sub, f"{path}.{fd.name}[{i}]")


def raw_call(server, request: pb.PreprocessRequest) -> bytes:
    """The Preprocess response's bytes as the server sent them (not re-encoded)."""
    with grpc.insecure_channel(server, options=[("grpc.max_receive_message_length", 256 << 20)]) as ch:
        call = ch.unary_unary("/sglang_mm.v1.MultimodalPreprocessor/Preprocess",
                              request_serializer=pb.PreprocessRequest.SerializeToString)
        return call(request, timeout=60)


def backend_bytes(data: bytes, backend: str) -> bytes:
    """payload.<backend> of a serialized PreprocessResponse, re-encoded field by field as
    a router copies it into the backend's GenerateRequest."""
    return getattr(pb.PreprocessResponse.FromString(data).payload, backend).SerializeToString()


@pytest.fixture(scope="module")
def case(pps):
    pp = pps[QWEN2]
    ids = prompt(pp, len(RAWS))
    return ids, pp.preprocess(RAWS, input_ids=ids)


def request(ids, backend: str, **options) -> pb.PreprocessRequest:
    return pb.PreprocessRequest(model=QWEN2, input_ids=ids, images=[pb.MediaItem(data=r) for r in RAWS],
                                backend=getattr(pb, f"BACKEND_{backend.upper()}"),
                                payload_options=pb.PayloadOptions(**options))


@pytest.mark.parametrize("backend", sorted(UPSTREAM))
def test_payload_parses_with_the_upstream_class(server, case, backend):
    ids, _out = case
    got = UPSTREAM[backend].FromString(backend_bytes(raw_call(server, request(ids, backend)), backend))
    assert_no_unknown_fields(got)
    assert got.ByteSize() > 0


def test_sglang(server, case):
    ids, out = case
    payload = pb.PreprocessResponse.FromString(raw_call(server, request(ids, "sglang"))).payload
    req = sg.GenerateRequest(request_id="w", tokenized=sg.TokenizedInput(input_ids=payload.input_ids),
                             mm_inputs=sg.MultimodalInputs.FromString(payload.sglang.SerializeToString()), stream=True)
    got = sg.GenerateRequest.FromString(req.SerializeToString())
    assert_no_unknown_fields(got)
    assert list(got.tokenized.input_ids) == out.input_ids.tolist()
    mm = got.mm_inputs
    assert list(mm.image_urls) == list(mm.video_urls) == list(mm.audio_urls) == []
    assert list(mm.image_data) == RAWS and list(mm.video_data) == list(mm.audio_data) == []
    assert list(mm.modalities) == ["image"]
    assert mm.pixel_values.dtype == "float32" and tensors.to_array(mm.pixel_values).tobytes() == out.pixel_values.tobytes()
    assert set(mm.model_specific_tensors) == set(out.tensors)
    for name, arr in out.tensors.items():
        td = mm.model_specific_tensors[name]
        assert td.dtype in ("float32", "int64") and np.array_equal(tensors.to_array(td), arr)
    assert mm.HasField("im_token_id") and mm.im_token_id == out.image_token_id
    assert [(p.offset, p.length) for p in mm.mm_placeholders] == [r for im in out.images for r in im.patch_ranges]


def test_vllm(server, case):
    ids, out = case
    data = raw_call(server, request(ids, "vllm"))
    payload = pb.PreprocessResponse.FromString(data).payload
    req = vl.GenerateRequest(request_id="w", tokenized=vl.TokenizedInput(input_ids=payload.input_ids),
                             mm_inputs=vl.MultimodalInputs.FromString(payload.vllm.SerializeToString()))
    got = vl.GenerateRequest.FromString(req.SerializeToString())
    assert_no_unknown_fields(got)
    assert got.WhichOneof("input") == "tokenized"
    mm = got.mm_inputs
    assert mm.pixel_values.WhichOneof("payload") == "inline" and mm.pixel_values.dtype == "float32"
    assert tensors.to_array(mm.pixel_values).tobytes() == out.pixel_values.tobytes()
    for name, arr in out.tensors.items():
        td = mm.model_specific_tensors[name]
        assert td.WhichOneof("payload") == "inline"
        assert td.dtype in ("float32", "int64", "uint32") and np.array_equal(tensors.to_array(td), arr)
    assert mm.HasField("im_token_id") and mm.im_token_id == out.image_token_id
    assert [(p.offset, p.length) for p in mm.mm_placeholders] == [im.structural_range for im in out.images]
    assert list(mm.mm_hashes) == [blake3.blake3(r).hexdigest() for r in RAWS]
    assert sorted(mm.batched_keys) == ["image_grid_thw", "patches_per_image"]
    assert dict(mm.flat_keys) == {"pixel_values": "patches_per_image"}
    assert list(mm.keep_on_cpu_keys) == ["image_grid_thw"]
    assert mm.modality == common_pb2.IMAGE and not mm.HasField("encoder_input_key")


def test_tokenspeed(server, case):
    ids, out = case
    payload = pb.PreprocessResponse.FromString(raw_call(server, request(ids, "tokenspeed"))).payload
    req = ts.GenerateRequest(request_id="w", tokenized=ts.TokenizedInput(input_ids=payload.input_ids),
                             mm_inputs=ts.MultimodalInputs.FromString(payload.tokenspeed.SerializeToString()))
    got = ts.GenerateRequest.FromString(req.SerializeToString())
    assert_no_unknown_fields(got)
    assert list(got.tokenized.input_ids) == out.input_ids.tolist()
    assert len(got.mm_inputs.items) == len(RAWS)
    for raw, item, im in zip(RAWS, got.mm_inputs.items, out.images):
        assert item.content_hash == blake3.blake3(blake3.blake3(raw).hexdigest().encode()).digest()
        assert item.encoder_input.dtype == "bfloat16" and item.encoder_input.WhichOneof("payload") == "inline"
        assert [(p.offset, p.length) for p in item.placeholders] == list(im.patch_ranges)
        assert item.placeholder_token_id == out.image_token_id and item.modality == common_pb2.IMAGE


def test_trtllm(server, case):
    ids, _out = case
    payload = pb.PreprocessResponse.FromString(raw_call(server, request(ids, "trtllm"))).payload
    req = tr.GenerateRequest(request_id="w", tokenized=tr.TokenizedInput(input_token_ids=payload.input_ids),
                             max_tokens=4, multimodal_input=payload.trtllm)
    got = tr.GenerateRequest.FromString(req.SerializeToString())
    assert_no_unknown_fields(got)
    assert list(got.tokenized.input_token_ids) == ids  # unexpanded: TensorRT-LLM expands itself
    assert got.HasField("multimodal_input") and list(got.multimodal_input.image_data) == RAWS
    assert got.max_tokens == 4
