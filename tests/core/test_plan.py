"""Plan == Preprocess: for every family, on random sizes (60 per family, two images per
request, in a prompt with text around the placeholders), ``Preprocessor.plan`` answers
the hash, sizes, grid, token counts, structural and patch ranges, effective options and
expanded length that ``preprocess`` then produces, or refuses with the same status and
message. The images come as JPEG, PNG, EXIF-rotated JPEG and PNG with its orientation
after the image data; Qwen-VL and Inkling requests carry random options. Plan decodes
nothing (``decode_pixels`` is never called) and says ``cached`` exactly when the
preprocessing cache holds the image.
"""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

import imagegen
from sglang_mm_grpc import Preprocessor, PreprocessError
from sglang_mm_grpc.pipeline import driver as driver_module
from sglang_mm_grpc.core.carriers import ImageOptions
from sglang_mm_grpc.config import resolve

SIZES_PER_FAMILY = 60
# One preset per family (Qwen twice: patch 14 and 16), the largest side each may take
# (the ones that never downscale get smaller images, so the test stays light).
FAMILIES = {
    "Qwen/Qwen2-VL-7B-Instruct": 1000,
    "Qwen/Qwen3-VL-8B-Instruct": 1000,
    "llava-hf/llava-1.5-7b-hf": 1000,
    "llava-hf/llava-v1.6-mistral-7b-hf": 1000,
    "mistral-community/pixtral-12b": 1000,
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": 1000,
    "microsoft/Phi-3.5-vision-instruct": 1000,
    "microsoft/Phi-4-multimodal-instruct": 1000,
    "thinkingmachines/Inkling": 700,
    "inkling-2x": 400,  # an Inkling checkpoint that upscales (rescale_image_frac 2.0)
    "thinkingmachines/Inkling-2-Mini": 700,
}


def _png_late_exif(h: int, w: int, orientation: int, seed: int) -> bytes:
    raw = imagegen.png(h, w, seed=seed, kind="smooth")
    e = Image.Exif()
    e[0x0112] = orientation
    data = e.tobytes()[6:]
    late = struct.pack(">I", len(data)) + b"eXIf" + data + struct.pack(">I", zlib.crc32(b"eXIf" + data) & 0xFFFFFFFF)
    return raw[:-12] + late + raw[-12:]  # before IEND


def _image(rng: np.random.Generator, max_side: int, seed: int) -> bytes:
    h, w = (int(v) for v in rng.integers(1, max_side + 1, 2))
    if max(h, w) > 40 * min(h, w):  # keep aspect ratios a model can take (extremes are tested elsewhere)
        h = max(h, w // 40 + 1)
        w = max(w, h // 40 + 1)
    kind = rng.integers(0, 4)
    if kind == 0:
        return imagegen.jpeg(h, w, seed=seed)
    if kind == 1:
        return imagegen.png(h, w, seed=seed, kind="smooth")
    if kind == 2:
        return imagegen.with_exif_orientation(h, w, int(rng.integers(1, 9)), seed=seed)
    return _png_late_exif(h, w, int(rng.integers(1, 9)), seed)


def _options(rng: np.random.Generator, family: str) -> ImageOptions | None:
    if family == "qwen_vl":
        return [None, ImageOptions(detail="low"), ImageOptions(max_tokens=int(rng.integers(16, 2000))),
                ImageOptions(min_pixels=int(rng.integers(1, 200_000)), max_pixels=int(rng.integers(200_000, 3_000_000))),
                ImageOptions(max_pixels=int(rng.integers(1000, 400_000)), detail="high")][int(rng.integers(0, 5))]
    if family == "inkling":
        return [None, ImageOptions(detail="low"), ImageOptions(detail="high")][int(rng.integers(0, 3))]
    return None


def _prompt(pp: Preprocessor, n: int, rng: np.random.Generator) -> list[int]:
    ids = [int(t) for t in rng.integers(1, 1000, 3)]
    for _ in range(n):
        ids += [pp.info["placeholder_token_id"], *(int(t) for t in rng.integers(1, 1000, int(rng.integers(0, 4))))]
    return ids


@pytest.fixture(scope="module")
def inkling_2x(tmp_path_factory) -> str:
    src = resolve("thinkingmachines/Inkling")
    d = tmp_path_factory.mktemp("inkling-2x")
    (d / "preprocessor_config.json").write_text(json.dumps({**src.preprocessor_config, "rescale_image_frac": 2.0}))
    (d / "config.json").write_text(json.dumps(src.config))
    return str(d)


def _model(name: str, inkling_2x: str, **kw) -> Preprocessor:
    return Preprocessor.from_model(inkling_2x if name == "inkling-2x" else name, **kw)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_plan_equals_preprocess_on_random_sizes(name, inkling_2x, monkeypatch):
    pp = _model(name, inkling_2x, cache_bytes=0)
    rng = np.random.default_rng(sum(map(ord, name)))
    decoded = []
    real_decode = driver_module.decode_pixels
    monkeypatch.setattr(driver_module, "decode_pixels", lambda *a, **k: decoded.append(1) or real_decode(*a, **k))
    agreed = refused = 0
    for r in range(SIZES_PER_FAMILY // 2):
        raws = [_image(rng, FAMILIES[name], seed=100 * r + k) for k in range(2)]
        ids = _prompt(pp, 2, rng)
        options = _options(rng, pp.family.name)
        per_image = [None, _options(rng, pp.family.name)] if rng.integers(0, 2) else None
        kw = dict(options=options, image_options=per_image)
        before = len(decoded)
        try:
            plan = pp.plan(raws, ids, **kw)
        except PreprocessError as e:
            assert len(decoded) == before
            with pytest.raises(PreprocessError) as again:
                pp.preprocess(raws, ids, **kw)
            assert (again.value.code, again.value.message) == (e.code, e.message)
            refused += 1
            continue
        assert len(decoded) == before, "plan decoded pixels"
        out = pp.preprocess(raws, ids, **kw)
        assert plan.input_ids_length == len(out.input_ids)
        assert plan.image_token_id == out.image_token_id
        assert plan.token_counts == out.token_counts
        for p, o in zip(plan.images, out.images):
            assert p == o, (r, [len(b) for b in raws])
        agreed += 1
    assert agreed >= SIZES_PER_FAMILY // 2 - 3, f"{refused} of {SIZES_PER_FAMILY // 2} requests refused"


@pytest.mark.parametrize("name", ["Qwen/Qwen2-VL-7B-Instruct", "thinkingmachines/Inkling", "inkling-2x"])
def test_plan_says_cached_when_the_cache_holds_the_image(name, inkling_2x):
    pp = _model(name, inkling_2x)
    a, b = imagegen.jpeg(300, 200, seed=1), imagegen.png(90, 130, seed=2)
    assert [im.cached for im in pp.plan([a, b]).images] == [False, False]
    pp.preprocess([a])
    stats = pp.cache.stats
    plan = pp.plan([a, b])
    assert [im.cached for im in plan.images] == [True, False]
    assert (pp.cache.stats.hits, pp.cache.stats.misses) == (stats.hits, stats.misses)  # only looked at
    out = pp.preprocess([a, b])
    assert [im.cached for im in out.images] == [True, False]
    assert plan.images == out.images
    low = ImageOptions(detail="low")
    assert pp.plan([a], options=low).images[0].cached is (pp.family.with_options(low) is pp.family)


def test_known_hashes_are_not_recomputed(monkeypatch):
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct", cache_bytes=0)
    raw = imagegen.jpeg(64, 64, seed=3)
    hashed = []
    real = driver_module.content_hash
    monkeypatch.setattr(driver_module, "content_hash", lambda d: hashed.append(1) or real(d))
    digest = real(raw)
    assert pp.plan([raw], hashes=[digest]).images[0].hash == digest
    assert pp.preprocess([raw], hashes=[digest]).images[0].hash == digest
    assert hashed == []
    pp.plan([raw, raw], hashes=[digest, None])
    assert hashed == [1]
