"""Per-request image options, family by family: every option accepted or refused as
docs/REQUESTS.md documents, the effective values echoed, per-image options over the
request's field by field, and the preprocessing cache keyed by the effective values (two
budgets for one image never share an entry).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import imagegen
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.core.carriers import ImageOptions
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.families import base
from sglang_mm_grpc.families.qwen.image import LOW_DETAIL_TOKENS

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
QWEN3 = "Qwen/Qwen3-VL-8B-Instruct"
INKLING = "thinkingmachines/Inkling"
IMAGE = imagegen.jpeg(480, 640, seed=1)

# What each family honours (docs/REQUESTS.md): option -> accepted.
OPTIONS = {
    "min_pixels": ImageOptions(min_pixels=100_000),
    "max_pixels": ImageOptions(max_pixels=100_000),
    "max_tokens": ImageOptions(max_tokens=100),
    "detail low": ImageOptions(detail="low"),
    "detail high": ImageOptions(detail="high"),
    "detail auto": ImageOptions(detail="auto"),
}
HONOURED = {
    "qwen_vl": {"min_pixels", "max_pixels", "max_tokens", "detail low", "detail high", "detail auto"},
    "inkling": {"detail low", "detail high", "detail auto"},
}
HONOURED["qwen3_omni"] = HONOURED["qwen2_5_omni"] = HONOURED["qwen_vl"]  # their images are Qwen-VL's
DEFAULT = {"detail high", "detail auto"}  # every other family


@pytest.fixture(scope="module")
def models() -> dict[str, Preprocessor]:
    return {name: Preprocessor.from_model(name, cache_bytes=0) for name in imagegen.image_presets()}


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("preset", imagegen.image_presets())
def test_every_option_is_accepted_or_refused_as_documented(models, preset, option):
    pp = models[preset]
    honoured = HONOURED.get(pp.family.name, DEFAULT)
    options = OPTIONS[option]
    if option in honoured:
        out = pp.plan([IMAGE], options=options)
        effective = out.images[0].options
        assert effective.detail == ("low" if options.detail == "low" else "high")
        assert pp.preprocess([IMAGE], options=options).images[0] == out.images[0]
    else:
        with pytest.raises(PreprocessError) as e:
            pp.plan([IMAGE], options=options)
        assert e.value.code is Code.INVALID_ARGUMENT
        field = option.split()[0]
        assert e.value.message.startswith(f"image 0: {field} ")
        assert f"cannot be honoured exactly by the {pp.family.name} family: " in e.value.message


@pytest.mark.parametrize("preset", imagegen.image_presets())
def test_nothing_asked_is_the_model_itself(models, preset):
    pp = models[preset]
    for options in (None, ImageOptions(), ImageOptions(detail="auto"), ImageOptions(detail="high")):
        assert pp.family.with_options(options) is pp.family
        assert pp.configure(1, options)[0].spec_key == pp.spec_key


@pytest.mark.parametrize("bad, message", [
    (ImageOptions(min_pixels=0), "min_pixels must be a positive integer, got 0"),
    (ImageOptions(max_pixels=-5), "max_pixels must be a positive integer, got -5"),
    (ImageOptions(max_tokens=0), "max_tokens must be a positive integer, got 0"),
    (ImageOptions(detail="medium"), "detail must be one of auto, low, high, got 'medium'"),
    (ImageOptions(min_pixels=5000, max_pixels=4000), "min_pixels 5000 is above max_pixels 4000"),
])
@pytest.mark.parametrize("preset", [QWEN2, INKLING, "llava-hf/llava-1.5-7b-hf"])
def test_values_no_family_takes(models, preset, bad, message):
    with pytest.raises(PreprocessError) as e:
        models[preset].plan([IMAGE, IMAGE], image_options=[None, bad])
    assert e.value.code is Code.INVALID_ARGUMENT and e.value.message == f"image 1: {message}"


def test_qwen_effective_values(models):
    for preset, unit in ((QWEN2, 28 * 28), (QWEN3, 32 * 32)):
        pp = models[preset]
        c = pp.family.config
        eff = pp.plan([IMAGE], options=ImageOptions(detail="low")).images[0].options
        assert (eff.max_pixels, eff.detail) == (LOW_DETAIL_TOKENS * unit, "low")
        assert eff.min_pixels == min(c.min_pixels, LOW_DETAIL_TOKENS * unit // 4)
        eff = pp.plan([IMAGE], options=ImageOptions(max_tokens=300, max_pixels=10**9)).images[0].options
        assert (eff.max_pixels, eff.max_tokens) == (300 * unit, 300)
        eff = pp.plan([IMAGE], options=ImageOptions(max_pixels=200_000)).images[0].options
        assert (eff.min_pixels, eff.max_pixels, eff.max_tokens) == (c.min_pixels, 200_000, None)
        eff = pp.plan([IMAGE], options=ImageOptions(max_pixels=c.max_pixels * 2)).images[0].options
        assert eff.max_pixels == c.max_pixels * 2  # above the model's: the token budget still bounds it
        with pytest.raises(PreprocessError, match="min_pixels 100000 cannot be honoured exactly by the qwen_vl "
                                                  "family: it is above the effective max_pixels"):
            pp.plan([IMAGE], options=ImageOptions(min_pixels=100_000, detail="low"))


@pytest.mark.parametrize("preset", [QWEN2, QWEN3])
def test_qwen_budgets_bound_the_tokens(models, preset):
    """detail low: at most LOW_DETAIL_TOKENS up to a 16:1 aspect ratio (thinner images keep
    smart_resize's shortest side and may take more: detail is never refused); max_tokens:
    at most that many, or refused."""
    pp = models[preset]
    low = pp.configure(1, ImageOptions(detail="low"))[0]
    capped = pp.configure(1, ImageOptions(max_tokens=200))[0]
    assert low.budget == pp.token_budget() and capped.budget == (200, "the image's max_tokens option")
    rng = np.random.default_rng(3)
    for _ in range(2000):
        h, w = (int(v) for v in rng.integers(1, 6000, 2))
        if max(h, w) > 16 * min(h, w):
            continue
        assert low.family.plan(h, w, 0).token_count <= LOW_DETAIL_TOKENS, (h, w)
        assert capped.family.plan(h, w, 0).token_count <= 200, (h, w)


def test_per_image_options_override_the_requests_field_by_field(models):
    pp = models[QWEN2]
    out = pp.plan([IMAGE, IMAGE, IMAGE], options=ImageOptions(max_tokens=200, detail="low"),
                  image_options=[None, ImageOptions(detail="high"), ImageOptions(max_tokens=30)])
    opts = [im.options for im in out.images]
    assert [(o.max_tokens, o.detail) for o in opts] == [(200, "low"), (200, "high"), (30, "low")]
    assert out.images[0].token_count <= 64 and out.images[1].token_count <= 200 and out.images[2].token_count <= 30
    with pytest.raises(PreprocessError, match="2 per-image options for 3 image"):
        pp.plan([IMAGE] * 3, image_options=[None, None])


def test_an_image_over_its_max_tokens_is_refused_from_its_header(models):
    """A thin image that smart_resize keeps above max_tokens (each side at least
    patch * merge): RESOURCE_EXHAUSTED naming the option, before decoding."""
    pp = models[QWEN2]
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([imagegen.jpeg(30, 3000, seed=2)], options=ImageOptions(max_tokens=10))
    assert e.value.code is Code.RESOURCE_EXHAUSTED
    assert e.value.message.endswith("over the budget of 10 tokens per image (the image's max_tokens option); "
                                    "not decoded")
    # the request's max_image_tokens, when lower, is the one named
    with pytest.raises(PreprocessError, match="budget of 5 tokens per image \\(the request's max_image_tokens\\)"):
        pp.plan([IMAGE], options=ImageOptions(max_tokens=100), max_image_tokens=5)


def test_variants_are_kept_and_bounded(models):
    pp = models[QWEN2]
    a = pp.family.with_options(ImageOptions(max_tokens=77))
    assert pp.family.with_options(ImageOptions(max_tokens=77)) is a
    assert a.fingerprint() != pp.family.fingerprint()
    for n in range(100, 100 + 2 * base.MAX_VARIANTS):
        pp.family.with_options(ImageOptions(max_tokens=n))
    assert len(pp.family.__dict__["_variants"]) == base.MAX_VARIANTS


# -- the cache, keyed by the effective values ---------------------------------------------


def test_two_budgets_for_one_image_never_share_an_entry():
    pp = Preprocessor.from_model(QWEN2)
    fresh = Preprocessor.from_model(QWEN2, cache_bytes=0)
    budgets = [None, ImageOptions(detail="low"), ImageOptions(max_tokens=100), ImageOptions(max_tokens=101),
               ImageOptions(min_pixels=1000, max_pixels=300_000), ImageOptions(max_pixels=300_000)]
    for options in budgets:
        first = pp.preprocess([IMAGE], options=options)
        assert not first.images[0].cached, options  # no other budget's entry answered
        assert pp.plan([IMAGE], options=options).images[0].cached
        again = pp.preprocess([IMAGE], options=options)
        assert again.images[0].cached
        expected = fresh.preprocess([IMAGE], options=options)
        assert np.array_equal(again.pixel_values, expected.pixel_values)
        assert np.array_equal(again.input_ids, expected.input_ids)
    assert pp.cache.stats.items == len(budgets)
    # options whose effective values are the same are the same entry (and the same output)
    same = pp.preprocess([IMAGE], options=ImageOptions(max_tokens=64))
    assert same.images[0].cached and same.images[0].options.max_pixels == 64 * 28 * 28


def test_a_batch_mixing_budgets_keys_each_image_by_its_own(models):
    pp = Preprocessor.from_model(QWEN2)
    out = pp.preprocess([IMAGE, IMAGE], image_options=[ImageOptions(detail="low"), None])
    assert [im.cached for im in out.images] == [False, False]
    assert out.images[0].token_count < out.images[1].token_count
    assert [im.cached for im in pp.plan([IMAGE, IMAGE], image_options=[None, ImageOptions(detail="low")]).images] \
        == [True, True]


def test_inkling_detail_low_is_no_upscale(tmp_path):
    """A checkpoint that upscales (rescale_image_frac 2.0): detail low is the processor
    called with rescale_image_frac=None, i.e. the output of a checkpoint without it."""
    src = resolve(INKLING)
    d = tmp_path / "inkling-2x"
    d.mkdir()
    (d / "preprocessor_config.json").write_text(json.dumps({**src.preprocessor_config, "rescale_image_frac": 2.0}))
    (d / "config.json").write_text(json.dumps(src.config))
    upscaling = Preprocessor.from_model(str(d))
    plain = Preprocessor.from_model(INKLING, cache_bytes=0)
    raw = imagegen.jpeg(90, 130, seed=4)
    high = upscaling.preprocess([raw])
    low = upscaling.preprocess([raw], options=ImageOptions(detail="low"))
    assert (high.images[0].resized_height, high.images[0].resized_width) == (180, 260)
    assert not low.images[0].cached  # the budgets do not share an entry
    expected = plain.preprocess([raw])
    assert np.array_equal(low.pixel_values, expected.pixel_values)
    assert np.array_equal(low.input_ids, expected.input_ids)
    assert low.images[0].options == ImageOptions(detail="low") and high.images[0].options.detail == "high"
    # on the preset (no upscale) detail low changes nothing, and is the same entry
    assert plain.family.with_options(ImageOptions(detail="low")) is plain.family


@pytest.mark.skipif(not __import__("importlib").util.find_spec("torch"), reason="needs torch (InklingImageProcessor)")
def test_inkling_detail_low_against_the_processor(tmp_path):
    """The real InklingImageProcessor called with rescale_image_frac=None."""
    from transformers import InklingImageProcessor

    from references.common import reference_input

    src = resolve(INKLING)
    cfg = {k: v for k, v in src.preprocessor_config.items() if k not in ("image_processor_type", "processor_class")}
    d = tmp_path / "inkling-2x"
    d.mkdir()
    (d / "preprocessor_config.json").write_text(json.dumps({**src.preprocessor_config, "rescale_image_frac": 2.0}))
    (d / "config.json").write_text(json.dumps(src.config))
    pp = Preprocessor.from_model(str(d), cache_bytes=0)
    processor = InklingImageProcessor(**{**cfg, "rescale_image_frac": 2.0})
    raws = [imagegen.jpeg(90, 130, seed=4), imagegen.png(41, 80, seed=5)]
    ref = processor([reference_input(r) for r in raws], rescale_image_frac=None, return_tensors="np")
    ours = pp.preprocess(raws, options=ImageOptions(detail="low"))
    assert np.array_equal(ours.pixel_values, np.asarray(ref["pixel_values"]))
    assert np.array_equal(ours.tensors["num_patches"], np.asarray(ref["num_patches"]))
