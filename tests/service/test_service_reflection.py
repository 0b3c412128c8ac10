"""What grpcurl does, with no generated classes of ours: discover the service through
server reflection, rebuild its descriptors in a fresh pool, build the request from JSON
and call it over a generic channel."""

from __future__ import annotations

import base64
import json

import blake3
import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import imagegen
from service_support import QWEN2

SERVICE = "sglang_mm.v1.MultimodalPreprocessor"


def reflect(channel, **query) -> reflection_pb2.ServerReflectionResponse:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    (resp,) = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(**query)]), timeout=10))
    assert not resp.HasField("error_response"), resp.error_response
    return resp


def served_pool(channel, symbol: str) -> descriptor_pool.DescriptorPool:
    """A fresh pool holding the file that defines ``symbol`` and all it imports."""
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def take(resp):
        for raw in resp.file_descriptor_response.file_descriptor_proto:
            fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
            files.setdefault(fdp.name, fdp)

    take(reflect(channel, file_containing_symbol=symbol))
    while missing := {d for f in files.values() for d in f.dependency} - set(files):
        for name in missing:
            take(reflect(channel, file_by_filename=name))
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name):
        if name in added:
            return
        for dep in files[name].dependency:
            add(dep)
        pool.Add(files[name])
        added.add(name)

    for name in files:
        add(name)
    return pool


def files_of(pool, file) -> set[str]:
    """``file`` and everything it imports, by name."""
    out, todo = set(), [file]
    while todo:
        f = todo.pop()
        if f.name not in out:
            out.add(f.name)
            todo.extend(f.dependencies)
    return out


def every_type_resolves(pool, service) -> int:
    """Walk every message and enum reachable from the service's methods through the pool
    (what grpcurl describe does); returns how many message types there are."""
    seen, todo = set(), [t for m in service.methods for t in (m.input_type, m.output_type)]
    while todo:
        desc = todo.pop()
        if desc.full_name in seen:
            continue
        seen.add(desc.full_name)
        assert pool.FindMessageTypeByName(desc.full_name) is desc
        for f in desc.fields:
            if f.message_type is not None:
                todo.append(f.message_type)
            if f.enum_type is not None:
                assert pool.FindEnumTypeByName(f.enum_type.full_name) is f.enum_type
    return len(seen)


def call(channel, pool, method: str, request_json: dict):
    svc = pool.FindServiceByName(SERVICE)
    m = svc.methods_by_name[method]
    req_cls = message_factory.GetMessageClass(m.input_type)
    resp_cls = message_factory.GetMessageClass(m.output_type)
    req = json_format.Parse(json.dumps(request_json), req_cls())
    rpc = channel.unary_unary(
        f"/{SERVICE}/{method}", request_serializer=req_cls.SerializeToString, response_deserializer=resp_cls.FromString
    )
    return json.loads(json_format.MessageToJson(rpc(req, timeout=30), preserving_proto_field_name=True))


def test_list_describe_call(server):
    with grpc.insecure_channel(server) as ch:
        # grpcurl list
        services = {s.name for s in reflect(ch, list_services="").list_services_response.service}
        assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services

        # grpcurl describe: the service, its methods, and the backend messages it imports
        pool = served_pool(ch, SERVICE)
        svc = pool.FindServiceByName(SERVICE)
        assert {m.name: (m.input_type.full_name, m.output_type.full_name) for m in svc.methods} == {
            "Preprocess": ("sglang_mm.v1.PreprocessRequest", "sglang_mm.v1.PreprocessResponse"),
            "Assemble": ("sglang_mm.v1.AssembleRequest", "sglang_mm.v1.AssembleResponse"),
            "Release": ("sglang_mm.v1.ReleaseRequest", "sglang_mm.v1.ReleaseResponse"),
            "ListModels": ("sglang_mm.v1.ListModelsRequest", "sglang_mm.v1.ListModelsResponse"),
            "GetStats": ("sglang_mm.v1.GetStatsRequest", "sglang_mm.v1.GetStatsResponse"),
            "GetServerInfo": ("sglang_mm.v1.GetServerInfoRequest", "sglang_mm.v1.GetServerInfoResponse"),
            "Plan": ("sglang_mm.v1.PreprocessRequest", "sglang_mm.v1.PlanResponse"),
        }
        payload = pool.FindMessageTypeByName("sglang_mm.v1.BackendPayload")
        assert {f.name: f.message_type.full_name for f in payload.oneofs_by_name["mm_inputs"].fields} == {
            "sglang": "sglang.grpc.scheduler.MultimodalInputs",
            "vllm": "vllm.grpc.engine.MultimodalInputs",
            "trtllm": "trtllm.MultimodalInput",
            "tokenspeed": "tokenspeed.grpc.scheduler.MultimodalInputs",
        }
        # the upstream files come with it, under their upstream names, and every type resolves
        assert {"vllm_engine.proto", "sglang_scheduler.proto", "trtllm_service.proto", "tokenspeed_scheduler.proto",
                "common.proto"} <= set(files_of(pool, payload.file))
        assert every_type_resolves(pool, svc) > 40
        shm = pool.FindMessageTypeByName("vllm.grpc.engine.TensorData").fields_by_name["shm"]
        assert shm.message_type.full_name == "smg.grpc.common.ShmHandle"

        # grpcurl -d '{...}' ... ListModels / Preprocess with a data URL
        models = call(ch, pool, "ListModels", {})["models"]
        assert QWEN2 in [m["name"] for m in models]

        png = imagegen.png(28, 28, seed=1)
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        resp = call(
            ch, pool, "Preprocess",
            {"model": QWEN2, "input_ids": [151652, 151655, 151653], "images": [{"url": url}], "backend": "BACKEND_VLLM"},
        )
        assert resp["images"][0]["hash"] == blake3.blake3(png).hexdigest()
        assert resp["input_ids"] == [151652] + [151655] * resp["images"][0]["token_count"] + [151653]
        vllm = resp["payload"]["vllm"]
        assert vllm["pixel_values"]["dtype"] == "float32" and vllm["pixel_values"]["shape"][1] == 1176
        assert vllm["flat_keys"] == {"pixel_values": "patches_per_image"}
        assert "handle" not in resp  # one-shot: nothing kept (empty strings are omitted in JSON)

        # and a two-phase round trip, JSON only
        handle = call(ch, pool, "Preprocess", {"model": QWEN2, "images": [{"url": url}]})["handle"]
        sg = call(ch, pool, "Assemble", {"handle": handle, "backend": "BACKEND_SGLANG", "release": True})
        assert sg["payload"]["sglang"]["modalities"] == ["image"]
        assert call(ch, pool, "Release", {"handle": handle}) == {}  # released: false is the default

        # the server's shared-memory identity, as a worker's GetServerInfo states its own
        info = call(ch, pool, "GetServerInfo", {})
        assert info["shm_namespace_id"].count(":") == 1 and info["default_transport"] == "TENSOR_TRANSPORT_INLINE"
