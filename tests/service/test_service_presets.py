"""Every built-in preset's payloads, decoded by the stub backends' decoders (the real
servicers' rules) in-process: what each backend understands equals the Preprocessor output.

The wire path over real processes, inline and through /dev/shm, for every preset is
test_wire_current.py; this pins the decoders' view without a server.
"""

from __future__ import annotations

import json

import blake3
import pytest
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sg
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as ts
from smg_grpc_proto.generated import trtllm_service_pb2 as tr
from smg_grpc_proto.generated import vllm_engine_pb2 as vl

import imagegen
from service_support import expected_sglang, expected_tokenspeed, expected_trtllm, expected_vllm, prompt, without
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.wire import assemble
from stub_backends import sglang_stub, tokenspeed_stub, trtllm_stub, vllm_stub

RAWS = [imagegen.jpeg(90, 140, seed=61), imagegen.png(70, 50, seed=62)]


def wire(msg):
    """Through bytes, as a backend receives it."""
    return type(msg).FromString(msg.SerializeToString())


def payload(out, backend, layout):
    return assemble.assemble(out, backend, layout).message()


@pytest.mark.parametrize("preset", imagegen.image_presets())
def test_every_preset_every_backend(preset):
    pp = Preprocessor.from_model(preset)
    ids = prompt(pp, len(RAWS))
    out = pp.preprocess(RAWS, input_ids=ids)
    hashes = [blake3.blake3(r).hexdigest() for r in RAWS]

    p = payload(out, "sglang", pp.field_layout)
    req = sg.GenerateRequest(request_id="p", tokenized=sg.TokenizedInput(input_ids=p.input_ids), mm_inputs=p.sglang)
    assert _jsonish(sglang_stub.decode(wire(req))) == expected_sglang(out, RAWS, "p")

    try:
        p = payload(out, "vllm", pp.field_layout)
    except PreprocessError as e:  # a model whose vLLM processor crops padded images itself
        assert e.code == Code.FAILED_PRECONDITION and pp.field_layout.unpadded_by
    else:
        req = vl.GenerateRequest(request_id="p", tokenized=vl.TokenizedInput(input_ids=p.input_ids), mm_inputs=p.vllm)
        got = vllm_stub.decode(wire(req))
        assert without(_jsonish(got), "transport") == expected_vllm(out, pp.field_layout, hashes, "p")
        assert len(got["items"]) == len(RAWS)

    p = payload(out, "tokenspeed", pp.field_layout)
    req = ts.GenerateRequest(request_id="p", tokenized=ts.TokenizedInput(input_ids=p.input_ids), mm_inputs=p.tokenspeed)
    assert without(_jsonish(tokenspeed_stub.decode(wire(req)))) == expected_tokenspeed(out, pp.field_layout, hashes, "p")

    p = payload(out, "trtllm", pp.field_layout)
    req = tr.GenerateRequest(request_id="p", tokenized=tr.TokenizedInput(input_token_ids=p.input_ids), multimodal_input=p.trtllm)
    assert _jsonish(trtllm_stub.decode(wire(req))) == expected_trtllm(ids, RAWS, "p")


def _jsonish(report):
    """The stub sends its report as JSON; compare in that form (tuples become lists)."""
    return json.loads(json.dumps(report))
