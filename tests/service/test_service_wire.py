"""The payload bytes parse with backend message definitions written here independently
from WIRE.md (FileDescriptorProtos built in code, in a separate DescriptorPool), and
every field lands where the real backend reads it, with nothing unknown left over."""

from __future__ import annotations

import blake3
import numpy as np
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields

import imagegen
from service_support import QWEN2, prompt
from sglang_mm_grpc._proto.sglang.grpc.scheduler import sglang_scheduler_pb2 as sg
from sglang_mm_grpc._proto.trtllm import trtllm_service_pb2 as tr
from sglang_mm_grpc._proto.vllm.grpc.engine import vllm_engine_pb2 as vl

F = descriptor_pb2.FieldDescriptorProto
REP, OPT = F.LABEL_REPEATED, F.LABEL_OPTIONAL
STR, BYTES, U32, BOOL, MSG = F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_UINT32, F.TYPE_BOOL, F.TYPE_MESSAGE


def message(fdp, name, fields, oneofs=(), maps=()):
    """fields: (name, number, type, label, type_name|None, oneof index|None, proto3 optional)."""
    m = fdp.message_type.add(name=name)
    for oneof in oneofs:
        m.oneof_decl.add(name=oneof)
    for key, number, value_type, value_type_name in maps:
        entry = "".join(p.capitalize() for p in key.split("_")) + "Entry"
        e = m.nested_type.add(name=entry)
        e.options.map_entry = True
        e.field.add(name="key", number=1, type=STR, label=OPT)
        v = e.field.add(name="value", number=2, type=value_type, label=OPT)
        if value_type_name:
            v.type_name = value_type_name
        m.field.add(name=key, number=number, type=MSG, label=REP, type_name=f".{fdp.package}.{name}.{entry}")
    for fname, number, ftype, label, type_name, oneof, optional in fields:
        f = m.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = type_name
        if optional:  # proto3 `optional`: a synthetic oneof of its own
            f.proto3_optional = True
            f.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name=f"_{fname}")
        elif oneof is not None:
            f.oneof_index = oneof
    return m


def f(name, number, ftype, label=OPT, type_name=None, oneof=None, optional=False):
    return (name, number, ftype, label, type_name, oneof, optional)


def tensor_and_range(fdp):
    message(fdp, "TensorData", [f("data", 1, BYTES), f("shape", 2, U32, REP), f("dtype", 3, STR)])
    message(fdp, "PlaceholderRange", [f("offset", 1, U32), f("length", 2, U32)])


def build_pool():
    pool = descriptor_pool.DescriptorPool()

    s = descriptor_pb2.FileDescriptorProto(name="independent/sglang.proto", package="sglang.grpc.scheduler", syntax="proto3")
    tensor_and_range(s)
    T, R = ".sglang.grpc.scheduler.TensorData", ".sglang.grpc.scheduler.PlaceholderRange"
    message(s, "TokenizedInput", [f("original_text", 1, STR), f("input_ids", 2, U32, REP)])
    message(
        s, "MultimodalInputs",
        [
            f("image_urls", 1, STR, REP), f("video_urls", 2, STR, REP), f("audio_urls", 3, STR, REP),
            f("pixel_values", 4, MSG, type_name=T),
            f("image_data", 5, BYTES, REP), f("video_data", 6, BYTES, REP), f("audio_data", 7, BYTES, REP),
            f("modalities", 8, STR, REP), f("im_token_id", 10, U32, optional=True),
            f("mm_placeholders", 11, MSG, REP, R),
        ],
        maps=[("model_specific_tensors", 9, MSG, T)],
    )
    message(
        s, "GenerateRequest",
        [
            f("request_id", 1, STR), f("tokenized", 2, MSG, type_name=".sglang.grpc.scheduler.TokenizedInput"),
            f("mm_inputs", 3, MSG, type_name=".sglang.grpc.scheduler.MultimodalInputs"), f("stream", 17, BOOL),
        ],
    )
    pool.Add(s)

    v = descriptor_pb2.FileDescriptorProto(name="independent/vllm.proto", package="vllm.grpc.engine", syntax="proto3")
    tensor_and_range(v)
    T, R = ".vllm.grpc.engine.TensorData", ".vllm.grpc.engine.PlaceholderRange"
    message(v, "TokenizedInput", [f("original_text", 1, STR), f("input_ids", 2, U32, REP)])
    mm = message(
        v, "MultimodalInputs",
        [
            f("pixel_values", 2, MSG, type_name=T), f("im_token_id", 4, U32, optional=True),
            f("mm_placeholders", 5, MSG, REP, R), f("mm_hashes", 6, STR, REP), f("batched_keys", 7, STR, REP),
        ],
        maps=[("model_specific_tensors", 3, MSG, T), ("flat_keys", 8, STR, None)],
    )
    mm.reserved_range.add(start=1, end=2)
    message(
        v, "GenerateRequest",
        [
            f("request_id", 1, STR),
            f("tokenized", 2, MSG, type_name=".vllm.grpc.engine.TokenizedInput", oneof=0), f("text", 3, STR, oneof=0),
            f("stream", 5, BOOL), f("mm_inputs", 7, MSG, type_name=".vllm.grpc.engine.MultimodalInputs"),
        ],
        oneofs=["input"],
    )
    pool.Add(v)

    t = descriptor_pb2.FileDescriptorProto(name="independent/trtllm.proto", package="trtllm", syntax="proto3")
    message(t, "TokenizedInput", [f("original_text", 1, STR), f("input_token_ids", 2, U32, REP), f("query_token_ids", 3, U32, REP)])
    message(t, "MultimodalInput", [f("image_data", 1, BYTES, REP)])
    message(
        t, "GenerateRequest",
        [
            f("request_id", 1, STR), f("tokenized", 2, MSG, type_name=".trtllm.TokenizedInput"),
            f("max_tokens", 5, U32), f("multimodal_input", 15, MSG, type_name=".trtllm.MultimodalInput", optional=True),
        ],
    )
    pool.Add(t)
    return pool


def cls(pool, name):
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


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


def tensor(td) -> np.ndarray:
    dt = {"float32": "<f4", "int64": "<i8", "uint32": "<u4"}[td.dtype]
    return np.frombuffer(td.data, dtype=dt).reshape(list(td.shape))


RAWS = [imagegen.jpeg(120, 200, seed=31), imagegen.png(50, 70, seed=32)]


@pytest.fixture(scope="module")
def pool():
    return build_pool()


@pytest.fixture(scope="module")
def case(pps):
    pp = pps[QWEN2]
    ids = prompt(pp, len(RAWS))
    return ids, pp.preprocess(RAWS, input_ids=ids)


def test_sglang(client, pool, case):
    ids, out = case
    payload = client.preprocess(QWEN2, RAWS, input_ids=ids, backend="sglang").payload
    # the router's request, built with our classes, read with the independent ones
    req = sg.GenerateRequest(
        request_id="w", tokenized=sg.TokenizedInput(input_ids=payload.input_ids), mm_inputs=payload.sglang, stream=True
    )
    got = cls(pool, "sglang.grpc.scheduler.GenerateRequest").FromString(req.SerializeToString())
    assert_no_unknown_fields(got)
    assert got.request_id == "w" and got.stream
    assert list(got.tokenized.input_ids) == out.input_ids.tolist()
    mm = got.mm_inputs
    assert list(mm.image_urls) == list(mm.video_urls) == list(mm.audio_urls) == []
    assert list(mm.image_data) == RAWS and list(mm.video_data) == list(mm.audio_data) == []
    assert list(mm.modalities) == ["image"]
    assert mm.pixel_values.dtype == "float32" and tensor(mm.pixel_values).tobytes() == out.pixel_values.tobytes()
    assert set(mm.model_specific_tensors) == set(out.tensors)
    for name, arr in out.tensors.items():
        td = mm.model_specific_tensors[name]
        assert td.dtype in ("float32", "int64") and np.array_equal(tensor(td), arr)
    assert mm.HasField("im_token_id") and mm.im_token_id == out.image_token_id
    assert [(p.offset, p.length) for p in mm.mm_placeholders] == [r for im in out.images for r in im.patch_ranges]


def test_vllm(client, pool, case):
    ids, out = case
    payload = client.preprocess(QWEN2, RAWS, input_ids=ids, backend="vllm").payload
    req = vl.GenerateRequest(request_id="w", tokenized=vl.TokenizedInput(input_ids=payload.input_ids), mm_inputs=payload.vllm)
    got = cls(pool, "vllm.grpc.engine.GenerateRequest").FromString(req.SerializeToString())
    assert_no_unknown_fields(got)
    assert got.WhichOneof("input") == "tokenized"
    assert list(got.tokenized.input_ids) == out.input_ids.tolist()
    mm = got.mm_inputs
    assert mm.pixel_values.dtype == "float32" and tensor(mm.pixel_values).tobytes() == out.pixel_values.tobytes()
    for name, arr in out.tensors.items():
        td = mm.model_specific_tensors[name]
        assert td.dtype in ("float32", "int64", "uint32") and np.array_equal(tensor(td), arr)
    assert mm.HasField("im_token_id") and mm.im_token_id == out.image_token_id
    assert [(p.offset, p.length) for p in mm.mm_placeholders] == [im.structural_range for im in out.images]
    assert list(mm.mm_hashes) == [blake3.blake3(r).hexdigest() for r in RAWS]
    assert sorted(mm.batched_keys) == ["image_grid_thw", "patches_per_image"]
    assert dict(mm.flat_keys) == {"pixel_values": "patches_per_image"}
    assert all(v in mm.model_specific_tensors for v in mm.flat_keys.values())


def test_trtllm(client, pool, case):
    ids, _out = case
    payload = client.preprocess(QWEN2, RAWS, input_ids=ids, backend="trtllm").payload
    req = tr.GenerateRequest(
        request_id="w", tokenized=tr.TokenizedInput(input_token_ids=payload.input_ids), max_tokens=4,
        multimodal_input=payload.trtllm,
    )
    got = cls(pool, "trtllm.GenerateRequest").FromString(req.SerializeToString())
    assert_no_unknown_fields(got)
    assert list(got.tokenized.input_token_ids) == ids  # unexpanded: TensorRT-LLM expands itself
    assert got.HasField("multimodal_input") and list(got.multimodal_input.image_data) == RAWS
    assert got.max_tokens == 4


def test_payload_messages_alone(client, pool, case):
    """The oneof members are the very messages: bytes of payload.<backend> parse as the
    backend's MultimodalInputs."""
    ids, out = case
    for backend, name in (
        ("sglang", "sglang.grpc.scheduler.MultimodalInputs"),
        ("vllm", "vllm.grpc.engine.MultimodalInputs"),
        ("trtllm", "trtllm.MultimodalInput"),
    ):
        payload = client.preprocess(QWEN2, RAWS, input_ids=ids, backend=backend).payload
        got = cls(pool, name).FromString(getattr(payload, backend).SerializeToString())
        assert_no_unknown_fields(got)
