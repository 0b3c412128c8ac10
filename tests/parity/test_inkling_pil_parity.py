"""Inkling's "pil" processor (``thinkingmachines/Inkling@pil``, ``--processor pil``): Pillow's
resize of the uint8 image, as SGLang's own Inkling processor and the gateway resize,
followed by ``InklingImageProcessor``'s patches. No torch: the reference is written out
here with Pillow and numpy, independently of our code, and compared with
``np.array_equal``:

* the image as the processor sees it (``reference_input``, then transformers'
  ``convert_to_rgb``: transparency onto white);
* the long edge scaled by ``rescale_image_frac``, capped at
  ``max(rescale_image_max_upscaled_long_edge, long edge)``, each side
  ``floor(side * ratio + 0.5)``, ``Image.resize`` unless the ratio is exactly 1;
* a canvas of ``ceil(H / 40)`` rows and ``W // 40 + 1`` columns of 40 px patches filled
  with -1.0, the image in its top-left corner;
* torchvision's fused float32 normalization ``(x - mean * 255) / (std * 255)`` (mean and
  std float32, multiplied in float32), the padding included;
* cut in raster order, each patch twice: [patches, 2, 40, 40, 3].
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import harness
import imagegen
from harness import each_kind, each_mode, each_size
from references.common import reference_input
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.families.inkling.inkling import rescaled_size

INKLING = "thinkingmachines/Inkling"
BIG = {"max_image_tokens": 1 << 20}


def reference(raw: bytes, pre: dict) -> np.ndarray:
    from transformers.image_transforms import convert_to_rgb

    rgb = np.asarray(convert_to_rgb(reference_input(raw), return_numpy=True))
    h, w = rgb.shape[:2]
    frac, cap = pre.get("rescale_image_frac"), pre.get("rescale_image_max_upscaled_long_edge", 2048)
    if frac is not None:
        long_edge = max(h, w)
        target = long_edge * frac
        if cap is not None:
            target = min(target, max(cap, long_edge))
        ratio = target / long_edge
        if ratio != 1.0:
            h, w = math.floor(h * ratio + 0.5), math.floor(w * ratio + 0.5)
            rgb = np.asarray(Image.fromarray(rgb).resize((w, h), pre.get("resample", Image.LANCZOS)))
    p = pre.get("size", {}).get("height", 40)
    rows, cols = -(-h // p), w // p + 1
    canvas = np.full((rows * p, cols * p, 3), -1.0, np.float32)
    canvas[:h, :w] = rgb
    factor = np.float32(1 / pre.get("rescale_factor", 1 / 255))
    mean = np.array(pre["image_mean"], np.float32) * factor
    std = np.array(pre["image_std"], np.float32) * factor
    canvas = (canvas - mean) / std
    patches = canvas.reshape(rows, p, cols, p, 3).transpose(0, 2, 1, 3, 4).reshape(rows * cols, p, p, 3)
    return np.repeat(patches[:, None], 2, axis=1)


BASE = resolve(INKLING).preprocessor_config
SETTINGS = {
    "preset": {},
    "sglang_serving_2x_cap_2048": {"rescale_image_frac": 2.0, "rescale_image_max_upscaled_long_edge": 2048},
    "frac_1.5_no_cap": {"rescale_image_frac": 1.5, "rescale_image_max_upscaled_long_edge": None},
    "frac_0.37": {"rescale_image_frac": 0.37},
    "bicubic_1.3_other_stats": {"rescale_image_frac": 1.3, "resample": 3, "image_mean": [0.5, 0.25, 0.75],
                                "image_std": [0.2, 0.3, 0.4]},
}


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def setting(request, tmp_path_factory):
    pre = {**BASE, **SETTINGS[request.param]}
    if request.param == "preset":
        pp = harness.preprocessor(f"{INKLING}@pil", **BIG)
    else:
        d = harness.write_model_dir(tmp_path_factory.mktemp("pil"), pre, resolve(INKLING).config)
        pp = harness.preprocessor(f"{d}@pil", **BIG)
    assert pp.family.config.processor == "pil" and pp.family.reference_processor.startswith("Pillow")
    return pp, pre


def check(pp, pre, raws):
    out = pp.preprocess(raws)
    want = np.concatenate([reference(raw, pre) for raw in raws])
    harness.assert_pixels(out, want)
    assert out.tensors["num_patches"].tolist() == [len(reference(raw, pre)) for raw in raws] == out.token_counts


SIZES = [(1, 1), (2, 2), (13, 7), (39, 41), (40, 40), (40, 80), (79, 121), (300, 500), (500, 300), (1, 1500),
         (1500, 1), (20, 2500), (1080, 1920)]


@each_size(SIZES)
@each_kind
def test_sizes(setting, size, kind):
    pp, pre = setting
    c = pp.family.config
    if min(rescaled_size(*size, c.rescale_image_frac, c.rescale_image_max_upscaled_long_edge)) < 1:
        pytest.skip("rescaled to nothing: refused (test_inkling_parity.py)")
    check(pp, pre, [harness.sized_png(size, kind)])


@each_mode
def test_modes_and_formats(setting, name):
    pp, pre = setting
    raw = imagegen.modes_corpus()[name]
    if name == "tiny_1x1_png" and (pre.get("rescale_image_frac") or 1) < 1:
        pytest.skip("rescaled to nothing")
    check(pp, pre, [raw])


def test_batch_and_large_photo(setting):
    pp, pre = setting
    check(pp, pre, [imagegen.png(300, 500, seed=1), harness.large_jpeg(3024, 4032), imagegen.jpeg(41, 39, seed=2),
                    imagegen.modes_corpus()["png_rgba"]])


@harness.examples(25)
@given(h=st.integers(1, 1200), w=st.integers(1, 1200), seed=st.integers(0, 2**16))
def test_random_sizes_serving_settings(h, w, seed, tmp_path_factory):
    pre = {**BASE, **SETTINGS["sglang_serving_2x_cap_2048"]}
    pp = _serving(tmp_path_factory)
    check(pp, pre, [imagegen.png(h, w, seed=seed)])


_SERVING: dict = {}


def _serving(tmp_path_factory):
    if "pp" not in _SERVING:
        pre = {**BASE, **SETTINGS["sglang_serving_2x_cap_2048"]}
        d = harness.write_model_dir(tmp_path_factory.mktemp("serving"), pre, resolve(INKLING).config)
        _SERVING["pp"] = harness.preprocessor(f"{d}@pil", **BIG)
    return _SERVING["pp"]


def test_the_pil_processor_is_offered_and_named():
    tv = Preprocessor.from_model(INKLING)
    pil = Preprocessor.from_model(f"{INKLING}@pil")
    assert tv.family.processors == ("torchvision", "pil") and tv.family.config.processor == "torchvision"
    assert pil.name == f"{INKLING}@pil" and pil.family.config.processor == "pil"
    assert tv.family.fingerprint() != pil.family.fingerprint()  # cached apart
    assert Preprocessor.from_model(INKLING, processor="pil").family.config.processor == "pil"
