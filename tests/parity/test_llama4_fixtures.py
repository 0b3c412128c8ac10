"""Llama 4 against the committed fixtures (no torch needed).

``tests/fixtures/llama4.json`` holds the outputs of the real ``Llama4ImageProcessor``
(bfloat16 pixel_values stored as float32, exact) and ``Llama4Processor`` ids, written by
``scripts/gen_fixtures.py`` where torch is installed. Every output must match byte for
byte (sha256 of the C-order bytes): pixel_values, aspect_ratios, patches_per_image and
the expanded ids of one ``<|image|>`` per image.
"""

from __future__ import annotations

import numpy as np
import pytest

import fixtures
import harness


@pytest.mark.parametrize("case", fixtures.params("llama4"))
def test_llama4_fixture(case):
    raws = harness.case_images(case)
    pp = harness.case_preprocessor(case["params"], cache_bytes=0)
    assert pp.family.name == "llama4"
    out = pp.preprocess(raws)
    want = case["outputs"]
    pv = out.pixel_values
    if want["pixel_values"]["dtype"] == "uint8":  # no rescale: HF keeps uint8, ours holds those values
        assert np.array_equal(pv, pv.astype(np.uint8))
        pv = pv.astype(np.uint8)
    fixtures.assert_output(pv, want["pixel_values"], "pixel_values")
    fixtures.assert_output(out.tensors["aspect_ratios"], want["aspect_ratios"], "aspect_ratios")
    fixtures.assert_output(out.tensors["patches_per_image"], want["patches_per_image"], "patches_per_image")
    fixtures.assert_output(out.input_ids.astype(np.int64), want["input_ids"], "input_ids")
