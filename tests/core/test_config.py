"""Presets and model directories: real checkpoint values, every accepted key variant."""

from __future__ import annotations

import json

import numpy as np
import pytest

import imagegen
from references import qwen as hf_qwen
from references.common import run_reference
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.config import preset_names, resolve

QWEN_CONFIG_CLASSES = {
    "Qwen/Qwen2-VL-7B-Instruct": "Qwen2VLConfig",
    "Qwen/Qwen2.5-VL-7B-Instruct": "Qwen2_5_VLConfig",
    "Qwen/Qwen3-VL-8B-Instruct": "Qwen3VLConfig",
}


def test_presets_listed():
    assert set(QWEN_CONFIG_CLASSES) <= set(preset_names())


@pytest.mark.parametrize("preset", sorted(QWEN_CONFIG_CLASSES))
def test_preset_token_ids_match_transformers_config(preset):
    import transformers

    hf = getattr(transformers, QWEN_CONFIG_CLASSES[preset])()
    src = resolve(preset)
    assert src.config["model_type"] == hf.model_type
    info = Preprocessor.from_model(preset).info
    assert info["image_token_id"] == hf.image_token_id
    ids = info["token_ids"]
    assert (ids["video_pad"], ids["vision_start"], ids["vision_end"]) == (
        hf.video_token_id, hf.vision_start_token_id, hf.vision_end_token_id)
    assert src.config["vision_config"]["spatial_merge_size"] == hf.vision_config.spatial_merge_size
    assert src.preprocessor_config["merge_size"] == hf.vision_config.spatial_merge_size


@pytest.mark.parametrize("preset", sorted(QWEN_CONFIG_CLASSES))
def test_preset_processor_values(preset):
    """The preset's processor values as the transformers class resolves them."""
    ref = hf_qwen.reference(resolve(preset).preprocessor_config)
    c = Preprocessor.from_model(preset).family.config
    assert (c.min_pixels, c.max_pixels) == (ref.size["shortest_edge"], ref.size["longest_edge"])
    assert (c.patch_size, c.temporal_patch_size, c.merge_size) == (ref.patch_size, ref.temporal_patch_size, ref.merge_size)
    assert c.image_mean == tuple(ref.image_mean) and c.image_std == tuple(ref.image_std)
    assert c.resample == int(ref.resample) and c.rescale_factor == ref.rescale_factor


VARIANTS = [
    # (our accepted spelling, the canonical spelling HF's class takes)
    ({"size": {"min_pixels": 5000, "max_pixels": 90000}}, {"min_pixels": 5000, "max_pixels": 90000}),
    ({"patch_size": {"height": 16, "width": 16}}, {"patch_size": 16}),
    ({"norm_mean": [0.5, 0.4, 0.3], "norm_std": 0.25}, {"image_mean": [0.5, 0.4, 0.3], "image_std": [0.25] * 3}),
    ({"resampling": 2}, {"resample": 2}),
    ({"size": {"shortest_edge": 3136, "longest_edge": 90000}, "max_pixels": 50000},
     {"size": {"shortest_edge": 3136, "longest_edge": 50000}}),
]


@pytest.mark.parametrize("ours,canonical", VARIANTS)
def test_key_variants(tmp_path, ours, canonical):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(ours))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    pp = Preprocessor.from_model(str(tmp_path))
    raws = [imagegen.png(300, 500), imagegen.png(777, 333, seed=2)]
    out, ref = pp.preprocess(raws), run_reference(hf_qwen.reference(canonical), raws)
    assert np.array_equal(out.pixel_values, ref["pixel_values"])
    assert np.array_equal(out.tensors["image_grid_thw"], ref["image_grid_thw"])


def test_named_directory(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"max_pixels": 100000}))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "image_token_id": 42}))
    pp = Preprocessor.from_model(f"mini={tmp_path}")
    assert pp.name == "mini" and pp.source == str(tmp_path) and pp.info["image_token_id"] == 42
    out = pp.preprocess([imagegen.png(20, 20)], input_ids=[1, 42, 2])
    assert out.input_ids.tolist() == [1] + [42] * out.token_counts[0] + [2]


@pytest.mark.parametrize("pre,cfg,cause", [
    ({"size": {"height": 224, "width": 224}}, {"model_type": "qwen2_vl"}, "shortest_edge"),
    ({"patch_size": {"height": 14, "width": 16}}, {"model_type": "qwen2_vl"}, "square"),
    ({"min_pixels": 10, "max_pixels": 5}, {"model_type": "qwen2_vl"}, "larger than"),
    ({"resample": 9}, {"model_type": "qwen2_vl"}, "filter"),
    ({"do_resize": False}, {"model_type": "qwen2_vl"}, "do_resize"),
    ({}, {"model_type": "bert"}, "no supported family"),
])
def test_bad_model_directory(tmp_path, pre, cfg, cause):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(pre))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PreprocessError) as e:
        Preprocessor.from_model(str(tmp_path))
    assert e.value.code is Code.INVALID_ARGUMENT and cause in e.value.message


def test_directory_without_preprocessor_config(tmp_path):
    with pytest.raises(PreprocessError) as e:
        Preprocessor.from_model(str(tmp_path))
    assert "preprocessor_config.json" in e.value.message


@pytest.mark.parametrize("preset", imagegen.image_presets())
def test_every_family_reads_norm_mean_and_norm_std(preset, tmp_path):
    """``norm_mean``/``norm_std`` (some checkpoints' spelling) mean what ``image_mean`` /
    ``image_std`` mean, in every family: same resolved config, same cache key."""
    src = resolve(preset)
    pre = dict(src.preprocessor_config)
    mean, std = (0.25, 0.5, 0.75), (0.5, 0.25, 0.125)
    spelled = {**pre, "image_mean": list(mean), "image_std": list(std)}
    renamed = {k: v for k, v in spelled.items() if k not in ("image_mean", "image_std")}
    renamed.update(norm_mean=list(mean), norm_std=list(std))
    fingerprints = []
    for name, variant in (("image", spelled), ("norm", renamed)):
        d = tmp_path / name
        d.mkdir()
        (d / "preprocessor_config.json").write_text(json.dumps(variant))
        (d / "config.json").write_text(json.dumps(src.config))
        if src.processor_config:
            (d / "processor_config.json").write_text(json.dumps(src.processor_config))
        family = Preprocessor.from_model(str(d)).family
        knobs = getattr(family.config, "image", family.config)  # LLaVA keeps its CLIP knobs apart
        assert (knobs.image_mean, knobs.image_std) == (mean, std)
        fingerprints.append(family.fingerprint())
    assert fingerprints[0] == fingerprints[1]
