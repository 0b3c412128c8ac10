"""Acceptance: every preset x backend x {one image, two images of different sizes}, inline
and over shared memory, in each wire dtype a backend takes, through a real server and the
real stub backends (separate processes on 127.0.0.1).

For each payload: it parses with the upstream classes (smg-grpc-proto) with no unknown
field, and what the stub read through ``mm_shm.tensor_payload_bytes`` equals the
in-process output bit for bit (float32) or its round-to-nearest-even (bfloat16, float16),
with every tensor where the transport says (inline, or a /dev/shm segment the stub
removed on reading). The one combination a consumer cannot take (vLLM with Pixtral /
Mistral 3 images of different sizes) is refused with FAILED_PRECONDITION.
"""

from __future__ import annotations

import os

import blake3
import grpc
import pytest
from google.protobuf import unknown_fields
from smg_grpc_proto.generated import sglang_scheduler_pb2, tokenspeed_scheduler_pb2, trtllm_service_pb2, vllm_engine_pb2

import imagegen
from servers import Server, wait_until
from service_support import (BACKENDS, expected_sglang, expected_tokenspeed, expected_trtllm, expected_vllm, generate,
                             prompt, without)
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.client import Client, payload_options

CASES = {
    "one": [imagegen.jpeg(90, 140, seed=71)],
    "two-sizes": [imagegen.jpeg(90, 140, seed=72), imagegen.png(140, 60, seed=73)],
}
UPSTREAM = {"sglang": sglang_scheduler_pb2.MultimodalInputs, "vllm": vllm_engine_pb2.MultimodalInputs,
            "trtllm": trtllm_service_pb2.MultimodalInput, "tokenspeed": tokenspeed_scheduler_pb2.MultimodalInputs}
# (transport, dtype) per backend: inline in every dtype it takes, shared memory where its TensorData can
VARIANTS = {
    "sglang": [("inline", "float32")],
    "trtllm": [("inline", None)],
    "vllm": [("inline", "float32"), ("inline", "bfloat16"), ("inline", "float16"), ("shm", "float32"),
             ("shm", "bfloat16")],
    "tokenspeed": [("inline", "bfloat16"), ("inline", "float32"), ("inline", "float16"), ("shm", "bfloat16"),
                   ("shm", "float32")],
}
PRESETS = imagegen.image_presets()


@pytest.fixture(scope="module")
def every_preset(tmp_path_factory):
    proc = Server(tmp_path_factory.mktemp("all-presets"), "--shm-lease", "60", "--log-level", "WARNING",
                  models=PRESETS)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def local():
    return {name: Preprocessor.from_model(name, cache_bytes=0) for name in PRESETS}


def no_unknown_fields(msg, path="payload"):
    assert len(unknown_fields.UnknownFieldSet(msg)) == 0, f"{path} carries fields the backend does not know"
    for fd, value in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        if fd.message_type.GetOptions().map_entry:
            subs = value.values() if fd.message_type.fields_by_name["value"].type == fd.TYPE_MESSAGE else ()
        else:
            subs = value if fd.is_repeated else [value]
        for i, sub in enumerate(subs):
            no_unknown_fields(sub, f"{path}.{fd.name}[{i}]")


def transports(report: dict) -> set[str]:
    seen = set(report.get("transport", {}).values())
    for item in report.get("items", []):
        seen |= set(item.get("transport", {}).values())
    return seen


def expected(backend, pp, out, raws, ids, dtype, shm):
    hashes = [blake3.blake3(r).hexdigest() for r in raws]
    if backend == "sglang":
        return expected_sglang(out, raws, "acc")
    if backend == "vllm":
        return expected_vllm(out, pp.field_layout, hashes, "acc", dtype)
    if backend == "tokenspeed":
        return expected_tokenspeed(out, pp.field_layout, hashes, "acc", dtype,
                                   via="shm handle" if shm and dtype == "bfloat16" else "decoded")
    return expected_trtllm(ids, raws, "acc")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("preset", PRESETS)
def test_payload_reaches_the_consumer(every_preset, stubs, local, preset, backend, case):
    raws = CASES[case]
    pp = local[preset]
    ids = prompt(pp, len(raws))
    out = pp.preprocess(raws, input_ids=ids)
    refused = backend == "vllm" and case == "two-sizes" and pp.field_layout.unpadded_by is not None
    with Client(every_preset.target, timeout=60) as c:
        for transport, dtype in VARIANTS[backend]:
            shm = transport == "shm"
            options = payload_options(dtype, transport, shm_min_bytes=0)
            if shm and dtype == "float32":
                # one-shot: the kernels write the pixel tensor straight into its segment
                call = lambda: c.preprocess(preset, raws, input_ids=ids, backend=backend, options=options).payload  # noqa: E731
            else:
                handle = c.preprocess(preset, raws, input_ids=ids).handle
                call = lambda: c.assemble(handle, backend, options=options, release=True)  # noqa: E731
            if refused:
                with pytest.raises(grpc.RpcError) as e:
                    call()
                assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "one image per request" in e.value.details()
                continue
            payload = call()
            no_unknown_fields(UPSTREAM[backend].FromString(getattr(payload, backend).SerializeToString()))
            _, report = generate(backend, stubs[backend], payload, request_id="acc")
            assert without(report, "transport") == expected(backend, pp, out, raws, ids, dtype, shm), (transport, dtype)
            if backend in ("vllm", "tokenspeed"):
                assert transports(report) == ({"shm"} if shm else {"inline"}), (transport, dtype)


def test_every_segment_was_read(every_preset):
    """Every segment handed out above was read by a stub (which removes it), and the server
    saw that and took its file back for a later segment, or closed it: nothing is left but
    the pool's files (its two spares, and at most two more given back by readers)."""
    with Client(every_preset.target) as c:
        info = wait_until(lambda: (i := c.server_info()).shm.read == i.shm.handed_out and i.shm.segments == 0 and i,
                          10) or c.server_info()
    assert info.shm.handed_out > 100 and info.shm.read == info.shm.handed_out
    # none removed unread but those written for payloads refused afterwards (vLLM + Pixtral sizes)
    assert set(info.shm.removed) <= {"failed"} and info.shm.segments == 0
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"sglang-mm.{info.shm_owner_id}.")]
    assert len(left) <= 4, left
