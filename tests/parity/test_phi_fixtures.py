"""Phi-4-multimodal and Phi-3-vision against the committed fixtures (no torch needed).

``tests/fixtures/phi4.json`` holds the outputs of the real transformers
``Phi4MultimodalProcessor``; ``tests/fixtures/phi3v.json`` those of the independent
transcription of Microsoft's published Phi-3-vision processor (tests/references/phi3v.py).
Both are written by ``scripts/gen_fixtures.py`` where torch is installed. Every output
must match byte for byte (sha256 of the C-order bytes), token ids included.
"""

from __future__ import annotations

import numpy as np
import pytest

import fixtures
import harness
from references import phi3v as hf_phi3v
from references import phi4mm as hf_phi4mm
from sglang_mm_grpc import Preprocessor

MODEL_TYPES = {"Phi4MultimodalImageProcessor": "phi4_multimodal", "Phi3VImageProcessor": "phi3_v"}


def preprocessor(params: dict) -> Preprocessor:
    if "model" in params:
        return harness.case_preprocessor(params)
    config = {"model_type": MODEL_TYPES[params["preprocessor_config"]["image_processor_type"]]}
    return harness.case_preprocessor(params, config)


@pytest.mark.parametrize("case", fixtures.params("phi4"))
def test_phi4(case):
    raws = harness.case_images(case)
    pp = preprocessor(case["params"])
    _, ids = hf_phi4mm.prompt(len(raws), pp.family.image_token_id)
    out = pp.preprocess(raws, input_ids=ids)
    want = case["outputs"]
    fixtures.assert_output(out.pixel_values, want["image_pixel_values"], "image_pixel_values")
    for name in ("image_sizes", "image_attention_mask", "num_img_tokens"):
        fixtures.assert_output(out.tensors[name], want[name], name)
    fixtures.assert_output(out.input_ids, want["input_ids"], "input_ids")
    assert out.token_counts == out.tensors["num_img_tokens"].tolist()


@pytest.mark.parametrize("case", fixtures.params("phi3v"))
def test_phi3v(case):
    raws = harness.case_images(case)
    pp = preprocessor(case["params"])
    counts = [pp.family.plan(*_size(r), i).token_count for i, r in enumerate(raws)]
    source, _ = hf_phi3v.expected_ids(len(raws), counts, pp.family.image_token_id)
    out = pp.preprocess(raws, input_ids=source)
    want = case["outputs"]
    fixtures.assert_output(out.pixel_values, want["pixel_values"], "pixel_values")
    for name in ("image_sizes", "num_img_tokens"):
        fixtures.assert_output(out.tensors[name], want[name], name)
    fixtures.assert_output(out.input_ids, want["input_ids"], "input_ids")


def _size(raw: bytes) -> tuple[int, int]:
    """(height, width) as decoded (EXIF orientation applied), for the prompt's counts."""
    from references.common import reference_input

    w, h = reference_input(raw).size
    return h, w


def test_sets_are_not_empty():
    assert len(fixtures.cases("phi4")) >= 25 and len(fixtures.cases("phi3v")) >= 40
    assert np.all([c["outputs"]["input_ids"]["dtype"] == "int64" for c in fixtures.cases("phi4")])
