"""Inkling and Inkling 2 against the committed fixtures (no torch needed).

``tests/fixtures/inkling.json`` and ``inkling2.json`` hold the outputs of the real
``InklingImageProcessor`` / ``InklingProcessor`` and ``Inkling2ImageProcessor`` /
``Inkling2Processor`` (torchvision, CPU), written by ``scripts/gen_fixtures.py`` where
torch is installed. Every output must match byte for byte (sha256 of the C-order bytes),
the expanded token ids included.
"""

from __future__ import annotations

import pytest

import fixtures
import harness
from references import inkling as hf_inkling

SETS = {"inkling": ("num_patches",), "inkling2": ("image_grid_thw",)}


def _check(name: str, case: dict) -> None:
    raws = harness.case_images(case)
    pp = harness.case_preprocessor(case["params"])
    _, ids = hf_inkling.prompt(len(raws), marker=name == "inkling")
    out = pp.preprocess(raws, input_ids=ids)
    want = case["outputs"]
    fixtures.assert_output(out.pixel_values, want["pixel_values"], "pixel_values")
    for tensor in SETS[name]:
        fixtures.assert_output(out.tensors[tensor], want[tensor], tensor)
    fixtures.assert_output(out.input_ids, want["input_ids"], "input_ids")


@pytest.mark.parametrize("case", fixtures.params("inkling"))
def test_inkling(case):
    _check("inkling", case)


@pytest.mark.parametrize("case", fixtures.params("inkling2"))
def test_inkling2(case):
    _check("inkling2", case)


def test_sets_cover_what_they_say():
    for name in SETS:
        cases = fixtures.cases(name)
        assert len(cases) >= 45
        assert any("rescale_image_frac" in c["params"].get("preprocessor_config", {}) for c in cases) == (
            name == "inkling")
        modes = {c["input"].get("name") for c in cases}
        assert {"png_rgba", "png_la", "png_p_transparency", "png_rgba_exif_orientation_6"} <= modes


@pytest.fixture(scope="module")
def gen():
    pytest.importorskip("torch")
    return fixtures.generator()


@pytest.mark.parametrize("name", sorted(SETS))
def test_committed_fixtures_match_installed_transformers(gen, name):
    """The generator, rerun on the first cases, reproduces the committed file."""
    fresh = gen.generate(name, limit=12)["cases"]
    assert fresh == fixtures.cases(name)[: len(fresh)]
