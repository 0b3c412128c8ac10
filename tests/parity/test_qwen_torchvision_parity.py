"""Qwen-VL with the torchvision backend against transformers' ``Qwen2VLImageProcessor``.

That class (not the ``...Pil`` one) is what vLLM/SGLang run with the fast processor: torch's
uint8 antialiased resize and the fused rescale/normalize. Without torch, the committed
``qwen_torchvision`` fixture cases are recomputed and compared; with torch, the real
processor runs on the same bytes across sizes, modes, hypothesis sizes and model
directories. Both compare float32 pixel values bit for bit and integer outputs exactly.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fixtures
import harness
import imagegen
from references import qwen as hf_qwen
from references.common import run_reference
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.config import resolve

PRESETS = ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
_PP: dict = {}


def torchvision_pp(model: str) -> Preprocessor:
    if model not in _PP:
        _PP[model] = harness.preprocessor(model, processor="torchvision")
    return _PP[model]


def dir_pp(tmp_path_factory, pre: dict) -> Preprocessor:
    key = json.dumps(pre, sort_keys=True)
    if key not in _PP:
        config = {"model_type": "qwen2_vl", "image_token_id": 151655}
        d = harness.write_model_dir(tmp_path_factory.mktemp("qwen"), pre, config)
        _PP[key] = harness.preprocessor(f"{d}@torchvision")
    return _PP[key]


def assert_same(out, ref: dict) -> None:
    """``ref``: arrays, or fixture digests (dicts)."""
    grid = out.tensors["image_grid_thw"]
    for name, ours in (("pixel_values", out.pixel_values), ("image_grid_thw", grid)):
        want = ref[name]
        if isinstance(want, dict):
            fixtures.assert_output(ours, want, name)
        else:
            assert ours.dtype == want.dtype and ours.shape == want.shape, name
            bad = int(np.count_nonzero(ours.view(np.uint8) != np.ascontiguousarray(want).view(np.uint8)))
            assert bad == 0, f"{name}: {bad} bytes differ"
    assert out.token_counts == [int(g.prod()) // 4 for g in grid] or out.tensors["image_grid_thw"].size == 0


# -- committed fixtures (no torch needed) ---------------------------------------------------


@pytest.mark.parametrize("case", fixtures.params("qwen_torchvision"))
def test_fixture(case, tmp_path_factory):
    raws = harness.case_images(case)
    p = case["params"]
    pp = torchvision_pp(p["model"]) if "model" in p else dir_pp(tmp_path_factory, p["preprocessor_config"])
    out = pp.preprocess(raws)
    grid = out.tensors["image_grid_thw"]
    fixtures.assert_output(out.pixel_values, case["outputs"]["pixel_values"], "pixel_values")
    fixtures.assert_output(grid, case["outputs"]["image_grid_thw"], "image_grid_thw")
    merge = pp.family.config.merge_size
    assert out.token_counts == [int(g.prod()) // merge**2 for g in grid]


# -- the option: naming, info, errors (no torch needed) -------------------------------------


def test_backend_choice_and_reference_name():
    pil = Preprocessor.from_model(PRESETS[0])
    tv = Preprocessor.from_model(PRESETS[0], processor="torchvision")
    suffixed = Preprocessor.from_model(PRESETS[0] + "@torchvision")
    assert pil.info["reference_processor"] == "Qwen2VLImageProcessorPil"
    assert tv.info["reference_processor"] == suffixed.info["reference_processor"] == "Qwen2VLImageProcessor"
    assert tv.name == PRESETS[0] and suffixed.name == PRESETS[0] + "@torchvision"
    assert Preprocessor.from_model(f"q={PRESETS[0]}@torchvision").name == "q"
    # The suffix wins over the deployment-wide preference; "pil" is always there.
    assert Preprocessor.from_model(PRESETS[0] + "@pil", processor="torchvision").info["reference_processor"].endswith("Pil")
    # Cache keys must tell the two apart.
    assert pil.spec_key != tv.spec_key == suffixed.spec_key


def test_backends_give_different_pixels_same_geometry():
    raw = imagegen.png(300, 500, seed=1, kind="noise")
    a = Preprocessor.from_model(PRESETS[0]).preprocess([raw])
    b = torchvision_pp(PRESETS[0]).preprocess([raw])
    assert np.array_equal(a.tensors["image_grid_thw"], b.tensors["image_grid_thw"])
    assert np.array_equal(a.input_ids, b.input_ids)
    assert not np.array_equal(a.pixel_values, b.pixel_values)


def test_resample_preference_leaves_other_families_alone():
    pp = Preprocessor.from_model("llava-hf/llava-1.5-7b-hf", processor="torchvision")
    assert pp.info["reference_processor"].endswith("Pil")
    with pytest.raises(PreprocessError) as e:
        Preprocessor.from_model("llava-hf/llava-1.5-7b-hf@torchvision")
    assert e.value.code is Code.INVALID_ARGUMENT and "torchvision" in e.value.message
    with pytest.raises(PreprocessError) as e:
        Preprocessor.from_model(PRESETS[0], processor="opencv")
    assert e.value.code is Code.INVALID_ARGUMENT


@pytest.mark.parametrize("resample", [4, 5])
def test_box_and_hamming_have_no_torchvision_form(tmp_path, resample):
    pp = harness.load_dir(tmp_path, {"resample": resample}, {"model_type": "qwen2_vl"})
    assert pp.info["reference_processor"].endswith("Pil")
    with pytest.raises(PreprocessError) as e:
        Preprocessor.from_model(f"{tmp_path}@torchvision")
    assert e.value.code is Code.INVALID_ARGUMENT


def test_cli_preprocess_resample(tmp_path, capsys):
    from sglang_mm_grpc.cli.commands import main

    img = tmp_path / "a.png"
    img.write_bytes(imagegen.png(40, 60, seed=2))
    out = tmp_path / "out.npz"
    assert main(["preprocess", "--model", PRESETS[0], "--resample", "torchvision", "--out", str(out), str(img)]) == 0
    assert "Qwen2VLImageProcessor:" in capsys.readouterr().out
    want = torchvision_pp(PRESETS[0]).preprocess([img.read_bytes()]).pixel_values
    assert np.array_equal(np.load(out)["pixel_values"], want)
    assert main(["preprocess", "--model", "llava-hf/llava-1.5-7b-hf", "--resample", "torchvision", str(img)]) == 1  # the family has no torchvision variant: a failure, as through a server


# -- against the real processor -------------------------------------------------------------


@pytest.fixture(scope="module")
def ref_for():
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")

    def run(pre: dict, raws: list[bytes]) -> dict[str, np.ndarray]:
        return run_reference(harness.cached(hf_qwen.torchvision_reference, pre), raws)

    return run


SIZES = [(1, 1), (2, 2), (7, 13), (27, 29), (32, 32), (57, 56), (255, 257), (336, 672), (480, 640), (512, 512),
         (720, 1280), (600, 3), (3, 599)]


@pytest.mark.parametrize("preset", PRESETS)
def test_against_processor_sizes(ref_for, preset):
    pre = resolve(preset).preprocessor_config
    pp = torchvision_pp(preset)
    for h, w in SIZES:
        for kind in ("noise", "smooth"):
            raw = imagegen.png(h, w, seed=h * 3 + w, kind=kind)
            assert_same(pp.preprocess([raw]), ref_for(pre, [raw]))


@harness.each_mode
def test_against_processor_modes(ref_for, name):
    raw = imagegen.modes_corpus()[name]
    assert_same(torchvision_pp(PRESETS[0]).preprocess([raw]), ref_for(resolve(PRESETS[0]).preprocessor_config, [raw]))


def test_against_processor_large_photo_and_batch(ref_for):
    pre = resolve(PRESETS[0]).preprocessor_config
    pp = torchvision_pp(PRESETS[0])
    raws = [imagegen.jpeg(3000, 4000, seed=3, kind="smooth", quality=85)]
    assert_same(pp.preprocess(raws), ref_for(pre, raws))
    raws = [imagegen.png(40 + 37 * i, 300 - 23 * i, seed=i) for i in range(5)] + [imagegen.jpeg(480, 640)]
    assert_same(pp.preprocess(raws), ref_for(pre, raws))


@harness.examples(40)
@given(h=st.integers(1, 700), w=st.integers(1, 700), seed=st.integers(0, 2**16),
       kind=st.sampled_from(["noise", "smooth"]), preset=st.sampled_from([PRESETS[0], PRESETS[2]]))
def test_against_processor_random_sizes(ref_for, h, w, seed, kind, preset):
    if max(h, w) / min(h, w) > 200:
        return
    raw = imagegen.png(h, w, seed=seed, kind=kind)
    assert_same(torchvision_pp(preset).preprocess([raw]), ref_for(resolve(preset).preprocessor_config, [raw]))


DIR_CONFIGS = {
    "bilinear": {"resample": 2, "max_pixels": 300000, "image_mean": [0.5] * 3, "image_std": [0.5] * 3},
    "lanczos_patch16": {"resample": 1, "patch_size": 16, "min_pixels": 1024, "max_pixels": 1048576},
    "nearest": {"resample": 0, "min_pixels": 100000, "max_pixels": 250000},
    "temporal1_rescale_only": {"temporal_patch_size": 1, "do_normalize": False, "max_pixels": 300000},
    "custom_rescale": {"rescale_factor": 0.5, "max_pixels": 250000},
}


@pytest.mark.parametrize("name", sorted(DIR_CONFIGS))
def test_against_processor_model_directory(ref_for, tmp_path_factory, name):
    pre = DIR_CONFIGS[name]
    pp = dir_pp(tmp_path_factory, pre)
    for size in harness.DIR_SIZES:
        raws = harness.png_and_jpeg(size)
        assert_same(pp.preprocess(raws), ref_for(pre, raws))


def test_committed_fixtures_match_installed_torch(ref_for):
    fresh = fixtures.generator().generate("qwen_torchvision", limit=12)["cases"]
    assert fresh == fixtures.cases("qwen_torchvision")[: len(fresh)]
