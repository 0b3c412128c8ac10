"""Every built-in preset's payloads, decoded by the stub backends' decoders (the real
servicers' rules) in-process: what each backend understands equals the Preprocessor output.

The wire path is covered over real processes for Qwen and Pixtral (test_service_flow.py);
this extends the payload rules to every family the server can serve.
"""

from __future__ import annotations

import json

import blake3
import pytest

import imagegen
from service_support import expected_sglang, expected_trtllm, expected_vllm, prompt
from sglang_mm_grpc import Preprocessor, assemble
from sglang_mm_grpc._proto.sglang.grpc.scheduler import sglang_scheduler_pb2 as sg
from sglang_mm_grpc._proto.trtllm import trtllm_service_pb2 as tr
from sglang_mm_grpc._proto.vllm.grpc.engine import vllm_engine_pb2 as vl
from sglang_mm_grpc.config import preset_names
from stub_backends import sglang_stub, trtllm_stub, vllm_stub

RAWS = [imagegen.jpeg(90, 140, seed=61), imagegen.png(70, 50, seed=62)]


def wire(msg):
    """Through bytes, as a backend receives it."""
    return type(msg).FromString(msg.SerializeToString())


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_every_backend(preset):
    pp = Preprocessor.from_model(preset)
    ids = prompt(pp, len(RAWS))
    out = pp.preprocess(RAWS, input_ids=ids)

    p = assemble.assemble(out, "sglang", pp.field_layout)
    req = sg.GenerateRequest(request_id="p", tokenized=sg.TokenizedInput(input_ids=p.input_ids), mm_inputs=p.sglang)
    assert _jsonish(sglang_stub.decode(wire(req))) == expected_sglang(out, RAWS, "p")

    p = assemble.assemble(out, "vllm", pp.field_layout)
    req = vl.GenerateRequest(request_id="p", tokenized=vl.TokenizedInput(input_ids=p.input_ids), mm_inputs=p.vllm)
    hashes = [blake3.blake3(r).hexdigest() for r in RAWS]
    got = vllm_stub.decode(wire(req))
    assert _jsonish(got) == expected_vllm(out, pp.field_layout, hashes, "p")
    assert len(got["items"]) == len(RAWS)

    p = assemble.assemble(out, "trtllm", pp.field_layout)
    req = tr.GenerateRequest(request_id="p", tokenized=tr.TokenizedInput(input_token_ids=p.input_ids), multimodal_input=p.trtllm)
    assert _jsonish(trtllm_stub.decode(wire(req))) == expected_trtllm(ids, RAWS, "p")


def _jsonish(report):
    """The stub sends its report as JSON; compare in that form (tuples become lists)."""
    return json.loads(json.dumps(report))
