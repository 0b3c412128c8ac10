#!/usr/bin/env python
"""Write the committed reference fixtures, ``tests/fixtures/<set>.json``, from the real
torch / torchvision / transformers code, so machines without torch (CI) still check the
torch-exact paths bit for bit.

Run where torch is installed next to the project's test extra:

    python scripts/gen_fixtures.py                    # every set
    python scripts/gen_fixtures.py qwen_torchvision   # some sets
    python scripts/gen_fixtures.py --check            # compare with the committed files
    python scripts/gen_fixtures.py --list

Adding a set is one function::

    @fixture_set("my_set")
    def my_set():
        \"\"\"What it covers and how its cases are chosen (seeds, sizes).\"\"\"
        for ...:
            recipe = {"make": "png", "h": 300, "w": 500, "seed": 1, "kind": "noise"}
            raw = build_input(recipe)                # tests/fixtures.build_input
            yield case("300x500-noise", recipe, {"pixel_values": reference(raw)}, params={...})

Inputs are never stored, only their recipe (``tests/fixtures.build_input``) and a digest
proving the test rebuilt the same input; outputs are stored as shape, dtype and sha256
(plus the values when small). Case lists come from fixed seeds, so a rerun with the same
library versions rewrites identical files. The consuming test reads the set with
``tests/fixtures.py`` (``params(name)``, ``case_input(case)``, ``assert_output``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import fixtures  # noqa: E402  (tests/fixtures.py: recipes, digests, paths)
from fixtures import build_input  # noqa: E402

#: name -> generator function; filled by @fixture_set.
SETS: dict[str, Callable[[], Iterable[dict]]] = {}


def fixture_set(name: str):
    """Register a generator of cases under ``name`` (its docstring is stored as the doc)."""

    def register(fn):
        if name in SETS:
            raise ValueError(f"fixture set {name!r} defined twice")
        SETS[name] = fn
        return fn

    return register


def case(case_id: str, recipe: dict, outputs: dict[str, np.ndarray], params: dict | None = None,
         inline_bytes: int = fixtures.INLINE_BYTES) -> dict:
    """One case: how to rebuild the input, the parameters, and the reference outputs."""
    return {
        "id": case_id,
        "input": recipe,
        "input_sha256": fixtures.input_digest(build_input(recipe)),
        "params": params or {},
        "outputs": {k: fixtures.digest(np.asarray(v), inline_bytes) for k, v in outputs.items()},
    }


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for dist in ("torch", "torchvision", "transformers", "numpy", "pillow"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def generate(name: str, limit: int | None = None) -> dict:
    """Run one set (its first ``limit`` cases) and return the document to store."""
    fn = SETS[name]
    cases = []
    for c in fn():
        cases.append(c)
        if limit is not None and len(cases) >= limit:
            break
    ids = [c["id"] for c in cases]
    if len(set(ids)) != len(ids):
        raise ValueError(f"fixture set {name!r} has duplicate case ids")
    return {
        "set": name,
        "doc": " ".join((fn.__doc__ or "").split()),
        "generator": "scripts/gen_fixtures.py",
        "versions": versions(),
        "cases": cases,
    }


def dump(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


# -- shared reference helpers -------------------------------------------------------------


def _torch():
    import torch

    torch.set_num_threads(1)  # results do not depend on it; keeps runs quiet and comparable
    return torch


def tv_resize_u8(img: np.ndarray, out_h: int, out_w: int, mode: str) -> np.ndarray:
    """torchvision's resize of an HWC (or HW) uint8 array, returned in the same layout."""
    torch = _torch()
    import torchvision.transforms.v2.functional as tvF
    from torchvision.transforms import InterpolationMode

    hwc = img if img.ndim == 3 else img[:, :, None]
    # A C-contiguous CHW tensor with standard strides, as HF hands torchvision.
    chw = torch.from_numpy(hwc.transpose(2, 0, 1).copy())
    interp = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC,
              "lanczos": InterpolationMode.LANCZOS, "nearest-exact": InterpolationMode.NEAREST_EXACT}[mode]
    out = tvF.resize(chw, [out_h, out_w], interpolation=interp, antialias=True)
    out = out.permute(1, 2, 0).numpy()
    return out if img.ndim == 3 else out[:, :, 0]


def interpolate_bicubic(x: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    torch = _torch()
    t = torch.from_numpy(np.ascontiguousarray(x))[None]
    return torch.nn.functional.interpolate(t, (out_h, out_w), mode="bicubic", align_corners=False,
                                           antialias=False)[0].numpy()


# -- sets ---------------------------------------------------------------------------------

_TV_MODES = ("bilinear", "bicubic", "lanczos")


def _resample_sizes(rng: np.random.Generator, n: int):
    """(h, w, out_h, out_w): up, down, one axis kept, near-identity, thin."""
    for k in range(n):
        h, w = (int(v) for v in rng.integers(1, 401, 2))
        form = k % 6
        if form == 0:
            oh, ow = h, int(rng.integers(1, 401))
        elif form == 1:
            oh, ow = int(rng.integers(1, 401)), w
        elif form == 2:
            oh, ow = max(1, h // int(rng.integers(2, 9))), max(1, w // int(rng.integers(2, 9)))
        elif form == 3:
            oh, ow = h * int(rng.integers(2, 4)), w * int(rng.integers(2, 4))
        elif form == 4:
            oh, ow = max(1, h + int(rng.integers(-2, 3))), max(1, w + int(rng.integers(-2, 3)))
        else:
            oh, ow = (int(v) for v in rng.integers(1, 401, 2))
        yield h, w, oh, ow


# (torch 2.14 trips an internal assert resizing uint8 to a 1x1 output with antialias; such
# a case has no reference and is left out.)
RESAMPLE_EDGES = [
    (1, 1, 5, 7), (1, 1, 1, 2), (2, 1, 1, 3), (1, 500, 300, 1), (500, 1, 1, 300), (2000, 3, 3, 2000),
    (3, 2000, 2000, 3), (640, 480, 3, 3), (5, 5, 5, 6), (7, 9, 7, 9), (1080, 1920, 308, 504),
    (37, 2000, 28, 1512), (255, 257, 256, 256), (4, 4, 1798, 1),
]
# Sizes where a fused and an unfused source index pick different nearest pixels.
NEAREST_EDGES = [(4, 1798), (130, 3055), (78, 4719), (28, 3178), (2, 1171), (10, 1045)]


@fixture_set("resample_tv")
def resample_tv_set():
    """torchvision tvF.resize(uint8 CHW, antialias=True) for bilinear, bicubic and lanczos,
    and NEAREST_EXACT: fixed edge sizes (1 pixel, thin, big factors, one axis, identity)
    for every mode, then 150 random cases (numpy default_rng(20260611): sizes 1..400,
    forms cycling up/down/one axis/integer factors/near identity; modes cycling; every
    fifth case one channel; noise and smooth content), then nearest-exact on 40 random
    cases and on sizes where the fused source index matters. Inputs: imagegen.pixels."""
    n = 0
    for h, w, oh, ow in RESAMPLE_EDGES:
        for mode in _TV_MODES:
            recipe = {"make": "pixels", "h": h, "w": w, "seed": n, "kind": "noise", "channels": 3}
            img = build_input(recipe)
            yield case(f"edge-{h}x{w}-{oh}x{ow}-{mode}", recipe, {"out": tv_resize_u8(img, oh, ow, mode)},
                       {"out_h": oh, "out_w": ow, "mode": mode})
            n += 1
    rng = np.random.default_rng(20260611)
    for k, (h, w, oh, ow) in enumerate(_resample_sizes(rng, 150)):
        mode = _TV_MODES[k % 3]
        channels = 1 if k % 5 == 0 else 3
        kind = "noise" if k % 4 else "smooth"
        recipe = {"make": "pixels", "h": h, "w": w, "seed": 1000 + k, "kind": kind, "channels": channels}
        img = build_input(recipe)
        yield case(f"r{k}-{h}x{w}x{channels}-{oh}x{ow}-{mode}-{kind}", recipe,
                   {"out": tv_resize_u8(img, oh, ow, mode)}, {"out_h": oh, "out_w": ow, "mode": mode})
    rng = np.random.default_rng(20260612)
    sizes = [(int(a), int(b), int(c), int(d)) for a, b, c, d in rng.integers(1, 301, (40, 4))]
    sizes += [(3, a, 2, b) for a, b in NEAREST_EDGES]
    for k, (h, w, oh, ow) in enumerate(sizes):
        recipe = {"make": "pixels", "h": h, "w": w, "seed": 2000 + k, "kind": "noise", "channels": 3}
        img = build_input(recipe)
        yield case(f"n{k}-{h}x{w}-{oh}x{ow}-nearest-exact", recipe,
                   {"out": tv_resize_u8(img, oh, ow, "nearest-exact")},
                   {"out_h": oh, "out_w": ow, "mode": "nearest-exact"})


@fixture_set("bicubic_f32")
def bicubic_f32_set():
    """F.interpolate(float32 [3, H, W], mode="bicubic", align_corners=False,
    antialias=False): the Phi global-image shapes, 1-pixel and same-size axes, then 60
    random cases (default_rng(20260613): sizes 1..300; inputs standard normal * 3 with
    seed 3000 + k, recipe normal_f32)."""
    shapes = [(896, 1344, 448, 448), (1344, 896, 448, 448), (336, 1008, 336, 336), (1, 1, 5, 3),
              (1, 9, 1, 4), (7, 7, 7, 7), (3, 2, 40, 33), (50, 60, 50, 33), (50, 60, 21, 60)]
    rng = np.random.default_rng(20260613)
    shapes += [tuple(int(v) for v in rng.integers(1, 301, 4)) for _ in range(60)]
    for k, (h, w, oh, ow) in enumerate(shapes):
        recipe = {"make": "normal_f32", "shape": [3, h, w], "seed": 3000 + k, "scale": 3.0}
        yield case(f"b{k}-{h}x{w}-{oh}x{ow}", recipe, {"out": interpolate_bicubic(build_input(recipe), oh, ow)},
                   {"out_h": oh, "out_w": ow})


LUT_CONFIGS = {
    "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711), 1 / 255),
    "half": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 1 / 255),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 0.00392156862745098),
    "odd": ((0.1, 0.2, 0.3), (0.7, 0.11, 0.9), 1 / 127.5),
}


LUT_INPUT = {"make": "uint8_values"}


def _values_tensor():
    """uint8 [1, 3, 16, 16] holding 0..255 in each channel plane (the LUT input)."""
    torch = _torch()
    return torch.from_numpy(build_input(LUT_INPUT)).reshape(1, 3, 16, 16)


@fixture_set("bf16")
def bf16_set():
    """torch float32 -> bfloat16 (.to(torch.bfloat16)) on special values and on 4096
    random bit patterns (recipe float32_bits, seed 4000), and transformers'
    Llama4ImageProcessor.rescale_and_normalize of every uint8 value for several
    mean/std/factor configurations and each do_rescale/do_normalize combination that runs."""
    torch = _torch()
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 3.4e38, 3.3961e38, -3.3961e38, 1e-40, -1e-45,
                         0.0, -0.0, 1.0039062, 1.0117188, 1.00390625, 1.01171875, 65504.0, 1 / 255],
                        np.float32)
    specials = np.concatenate([specials, np.array([0x7F800001, 0xFFC00001, 0x7FBFFFFF, 0x3F808000, 0x3F818000],
                                                  np.uint32).view(np.float32)])
    recipes = {
        "specials": {"make": "float32_values", "bits": [int(v) for v in specials.view(np.uint32)]},
        "random": {"make": "float32_bits", "n": 4096, "seed": 4000},
    }
    for name, recipe in recipes.items():
        x = build_input(recipe)
        bits = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        yield case(f"to-bf16-{name}", recipe, {"bits": bits}, inline_bytes=1 << 14)
    from transformers import Llama4ImageProcessor

    proc = Llama4ImageProcessor()
    for name, (mean, std, factor) in LUT_CONFIGS.items():
        for do_rescale, do_normalize in ((True, True), (True, False), (False, False)):
            out = proc.rescale_and_normalize(_values_tensor(), do_rescale, factor, do_normalize, mean, std)
            dtype = str(out.dtype).replace("torch.", "")
            lut = out.reshape(3, 256).float().numpy()
            yield case(f"llama4-lut-{name}-r{int(do_rescale)}n{int(do_normalize)}", LUT_INPUT, {"lut": lut},
                       {"mean": list(mean), "std": list(std), "rescale_factor": factor, "do_rescale": do_rescale,
                        "do_normalize": do_normalize, "hf_dtype": dtype}, inline_bytes=1 << 13)


@fixture_set("torchvision_lut")
def torchvision_lut_set():
    """The torchvision backend's fused rescale_and_normalize (TorchvisionBackend, via
    Qwen2VLImageProcessor) of every uint8 value, for several mean/std/factor
    configurations and each do_rescale/do_normalize combination."""
    from transformers import Qwen2VLImageProcessor

    proc = Qwen2VLImageProcessor()
    for name, (mean, std, factor) in LUT_CONFIGS.items():
        for do_rescale in (True, False):
            for do_normalize in (True, False):
                out = proc.rescale_and_normalize(_values_tensor(), do_rescale, factor, do_normalize, mean, std)
                lut = out.reshape(3, 256).float().numpy()
                yield case(f"{name}-r{int(do_rescale)}n{int(do_normalize)}", LUT_INPUT, {"lut": lut},
                           {"mean": list(mean), "std": list(std), "rescale_factor": factor,
                            "do_rescale": do_rescale, "do_normalize": do_normalize}, inline_bytes=1 << 13)


QWEN_PRESETS = ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
QWEN_SIZES = [(1, 1), (13, 7), (28, 28), (55, 57), (56, 56), (101, 333), (300, 500), (448, 448), (999, 777),
              (1080, 1920), (3000, 20), (20, 3000), (224, 4000)]
# Model directories with non-default settings (the torchvision filters other than bicubic).
QWEN_DIRS = {
    "bilinear-half": {"min_pixels": 4096, "max_pixels": 409600, "resample": 2, "image_mean": [0.5, 0.5, 0.5],
                      "image_std": [0.5, 0.5, 0.5]},
    "lanczos-patch16": {"min_pixels": 1024, "max_pixels": 1048576, "patch_size": 16, "resample": 1},
    "nearest": {"resample": 0, "max_pixels": 250000, "min_pixels": 100000},
    "temporal1-no-normalize": {"temporal_patch_size": 1, "do_normalize": False, "max_pixels": 300000},
}


def qwen_reference(preprocessor_config: dict, raws: list[bytes]) -> dict[str, np.ndarray]:
    """The real Qwen2VLImageProcessor (torchvision class) on PARITY.md's reference input."""
    _torch()
    from reference import reference_input
    from transformers import Qwen2VLImageProcessor

    cfg = {k: v for k, v in preprocessor_config.items() if k not in ("image_processor_type", "processor_class")}
    out = Qwen2VLImageProcessor(**cfg)([reference_input(r) for r in raws], return_tensors="np")
    return {k: np.asarray(v) for k, v in out.items()}


@fixture_set("qwen_torchvision")
def qwen_torchvision_set():
    """transformers' Qwen2VLImageProcessor (torchvision backend, CPU) on PNG/JPEG bytes
    from imagegen: the Qwen2-VL and Qwen3-VL presets over tiny, thin, odd, on-grid and
    HD sizes with noise and smooth content, a few Pillow modes, one multi-image request
    and one large JPEG; model directories with bilinear, lanczos, nearest and no-normalize
    settings. Outputs: pixel_values (digest) and image_grid_thw."""
    sys.path.insert(0, str(ROOT))
    from sglang_mm_grpc.config import resolve

    for preset in QWEN_PRESETS:
        pre = resolve(preset).preprocessor_config
        tag = preset.split("/")[1]
        for h, w in QWEN_SIZES:
            for kind in ("noise", "smooth"):
                recipe = {"make": "png", "h": h, "w": w, "seed": h * 7 + w, "kind": kind}
                ref = qwen_reference(pre, [build_input(recipe)])
                yield case(f"{tag}-{h}x{w}-{kind}", recipe, ref, {"model": preset})
        for name in ("png_rgba", "png_p_transparency", "jpeg_cmyk", "jpeg_exif_orientation_6", "png_la"):
            recipe = {"make": "mode", "name": name}
            yield case(f"{tag}-mode-{name}", recipe, qwen_reference(pre, [build_input(recipe)]), {"model": preset})
        items = [{"make": "png", "h": 40 + 37 * i, "w": 300 - 23 * i, "seed": i, "kind": "noise"} for i in range(4)]
        items.append({"make": "jpeg", "h": 480, "w": 640, "seed": 0, "kind": "smooth"})
        recipe = {"make": "list", "items": items}
        yield case(f"{tag}-five-images", recipe, qwen_reference(pre, build_input(recipe)), {"model": preset})
    recipe = {"make": "jpeg", "h": 2000, "w": 3000, "seed": 3, "kind": "smooth"}
    pre = resolve(QWEN_PRESETS[0]).preprocessor_config
    yield case("Qwen2-VL-7B-Instruct-2000x3000-jpeg", recipe, qwen_reference(pre, [build_input(recipe)]),
               {"model": QWEN_PRESETS[0]})
    for name, pre in QWEN_DIRS.items():
        for h, w in ((300, 500), (37, 2000), (13, 7), (1080, 1920)):
            recipe = {"make": "png", "h": h, "w": w, "seed": h + w, "kind": "noise"}
            yield case(f"dir-{name}-{h}x{w}", recipe, qwen_reference(pre, [build_input(recipe)]),
                       {"preprocessor_config": pre})


LLAMA4_PRESET = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
LLAMA4_SIZES = [(1, 1), (13, 7), (100, 100), (300, 500), (335, 336), (336, 336), (337, 336), (336, 672),
                (673, 672), (999, 777), (1008, 1008), (1342, 2464), (1, 2000), (3000, 20), (336, 5376)]
# Model directories with non-default settings (filters, canvases, tile size, value paths).
LLAMA4_DIRS = {
    "bicubic-max-canvas-4": {"resample": 3, "max_patches": 4, "resize_to_max_canvas": True},
    "tile224-clip-stats": {"size": {"height": 224, "width": 224}, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                           "image_std": [0.26862954, 0.26130258, 0.27577711], "max_patches": 6},
    "lanczos-rescale-only": {"resample": 1, "do_normalize": False, "rescale_factor": 0.0137},
    "nearest-no-rescale": {"resample": 0, "do_normalize": False, "do_rescale": False, "max_patches": 8},
}


def llama4_reference(preprocessor_config: dict, processor_config: dict, raws: list[bytes]) -> dict[str, np.ndarray]:
    """transformers' Llama4ImageProcessor (bf16 pixel_values as float32, exact) and the
    Llama4Processor's ids for a prompt of one <|image|> per image (the expansions back to
    back), with a word tokenizer holding Llama 4's special-token ids."""
    _torch()
    sys.path.insert(0, str(ROOT))
    from reference import llama4_reference as build, reference_input, run_torch_reference
    from sglang_mm_grpc.families.llama4 import LLAMA4_IDS

    proc = build(preprocessor_config, processor_config, LLAMA4_IDS)
    out = run_torch_reference(proc.image_processor, raws)
    ratios = out["aspect_ratios"]
    ids = proc(images=[reference_input(r) for r in raws], text=["<|image|>" * len(raws)], return_tensors="pt")
    return {
        "pixel_values": out["pixel_values"],
        "aspect_ratios": ratios,
        "patches_per_image": np.array([r * c + (r * c > 1) for r, c in ratios.tolist()], dtype=np.int64),
        "input_ids": ids["input_ids"][0].numpy(),
    }


@fixture_set("llama4")
def llama4_set():
    """transformers' Llama4ImageProcessor (torchvision, CPU; pixel_values bfloat16 stored
    as float32) and Llama4Processor ids on PNG/JPEG bytes from imagegen: the Scout preset
    over tiny, thin, odd and tile-multiple sizes (noise, and smooth up to 1 MP), every third
    canvas shape and the two thinnest (JPEG, sized to need a resize where one exists; the
    torch-run parity suite covers all 50), a few Pillow
    modes, a multi-image request and a large JPEG; model directories with bicubic,
    lanczos and nearest filters, max-canvas, a 224 tile, rescale-only and raw values.
    Outputs: pixel_values (digest), aspect_ratios, patches_per_image (tiles per image,
    global included) and input_ids (one <|image|> per image, expanded)."""
    from sglang_mm_grpc.config import resolve
    from sglang_mm_grpc.families import llama4

    src = resolve(LLAMA4_PRESET)
    pre, proc = src.preprocessor_config, src.processor_config
    params = {"model": LLAMA4_PRESET}
    for h, w in LLAMA4_SIZES:
        for kind in ("noise", "smooth") if h * w <= 1_000_000 else ("noise",):
            recipe = {"make": "png", "h": h, "w": w, "seed": h * 7 + w, "kind": kind}
            yield case(f"scout-{h}x{w}-{kind}", recipe, llama4_reference(pre, proc, [build_input(recipe)]), params)
    canvases = llama4.supported_canvases(16, 336)
    for ch, cw in dict.fromkeys(canvases[::3] + ((336, 5376), (5376, 336))):
        h, w = ch, cw
        for f in (1.3, 1.15, 0.9, 0.8, 1.05, 0.97):
            a, b = round(ch * f) + 3, round(cw * f) - 5
            if llama4.best_canvas(a, b, canvases) == (ch, cw) and llama4.resized_size(a, b, (ch, cw), 336) != (a, b):
                h, w = a, b
                break
        recipe = {"make": "jpeg", "h": h, "w": w, "seed": h + w, "kind": "smooth"}
        yield case(f"scout-canvas-{ch // 336}x{cw // 336}-{h}x{w}", recipe,
                   llama4_reference(pre, proc, [build_input(recipe)]), params)
    for name in ("png_rgba", "png_p_transparency", "jpeg_cmyk", "jpeg_exif_orientation_6", "png_la", "gif_animated"):
        recipe = {"make": "mode", "name": name}
        yield case(f"scout-mode-{name}", recipe, llama4_reference(pre, proc, [build_input(recipe)]), params)
    items = [{"make": "png", "h": 40 + 337 * i, "w": 900 - 173 * i, "seed": i, "kind": "noise"} for i in range(4)]
    items += [{"make": "png", "h": 300, "w": 500, "seed": 9, "kind": "smooth"}, {"make": "mode", "name": "png_rgba"}]
    recipe = {"make": "list", "items": items}
    yield case("scout-six-images", recipe, llama4_reference(pre, proc, build_input(recipe)), params)
    recipe = {"make": "jpeg", "h": 2000, "w": 3000, "seed": 3, "kind": "smooth"}
    yield case("scout-2000x3000-jpeg", recipe, llama4_reference(pre, proc, [build_input(recipe)]), params)
    for name, dir_pre in LLAMA4_DIRS.items():
        for h, w in ((300, 500), (37, 2000), (13, 7), (1080, 1920)):
            recipe = {"make": "png", "h": h, "w": w, "seed": h + w, "kind": "noise"}
            yield case(f"dir-{name}-{h}x{w}", recipe, llama4_reference(dir_pre, {}, [build_input(recipe)]),
                       {"preprocessor_config": dir_pre, "config": {"model_type": "llama4"}})


PHI4_PRESET = "microsoft/Phi-4-multimodal-instruct"
PHI4_SIZES = [(1, 1), (13, 7), (10, 3000), (3000, 20), (300, 500), (500, 300), (448, 448), (449, 448), (999, 777),
              (1000, 700), (448, 1741), (1292, 896), (200, 16128), (449, 8512), (3136, 3136),
              (4000, 3000), (20, 16000)]


def phi4_reference(pre: dict, raws: list[bytes]) -> dict[str, np.ndarray]:
    """The real Phi4MultimodalProcessor (image processor + word-level tokenizer): the
    image processor's outputs and the expanded ids of "hello <image> world ..."."""
    _torch()
    from phi_reference import phi4_processor, phi4_prompt
    from reference import reference_input

    proc = phi4_processor(pre)
    images = [reference_input(r) for r in raws]
    out = {k: np.asarray(v) for k, v in proc.image_processor(images, return_tensors="np").items()}
    text, _ = phi4_prompt(len(raws))
    out["input_ids"] = np.asarray(proc(text=text, images=images, return_tensors="np")["input_ids"][0])
    return out


@fixture_set("phi4")
def phi4_set():
    """transformers' Phi4MultimodalImageProcessor (torchvision, CPU) and the expanded ids of
    Phi4MultimodalProcessor (word-level tokenizer, <|endoftext10|> = 200010; prompt from
    tests/phi_reference.phi4_prompt) for the Phi-4-multimodal preset: tiny, thin, odd,
    padded grids of every orientation, grids past dynamic_hd (closest-aspect search), a
    large JPEG, Pillow modes, and one three-image request (batch padding with ones masks);
    a model directory with dynamic_hd 4 and size 224 / patch 16. Outputs:
    image_pixel_values, image_sizes, image_attention_mask, num_img_tokens, input_ids."""
    sys.path.insert(0, str(ROOT))
    from sglang_mm_grpc.config import resolve

    pre = resolve(PHI4_PRESET).preprocessor_config
    for h, w in PHI4_SIZES:
        kind = "noise" if h * w < 400_000 else "smooth"
        recipe = {"make": "png" if h * w < 1_000_000 else "jpeg", "h": h, "w": w, "seed": h + 3 * w, "kind": kind}
        yield case(f"{h}x{w}-{kind}", recipe, phi4_reference(pre, [build_input(recipe)]), {"model": PHI4_PRESET})
    for name in ("png_rgba", "png_p_transparency", "jpeg_cmyk", "jpeg_exif_orientation_6", "png_la", "gif_animated"):
        recipe = {"make": "mode", "name": name}
        yield case(f"mode-{name}", recipe, phi4_reference(pre, [build_input(recipe)]), {"model": PHI4_PRESET})
    items = [{"make": "png", "h": 300, "w": 500, "seed": 1, "kind": "noise"},
             {"make": "jpeg", "h": 1000, "w": 700, "seed": 2, "kind": "smooth"},
             {"make": "png", "h": 13, "w": 7, "seed": 3, "kind": "noise"}]
    recipe = {"make": "list", "items": items}
    yield case("three-images", recipe, phi4_reference(pre, build_input(recipe)), {"model": PHI4_PRESET})
    for name, extra in {"dynamic-hd-4": {"dynamic_hd": 4},
                        "size224-patch16": {"size": {"height": 224, "width": 224}, "patch_size": 16}}.items():
        d = dict(pre) | extra
        for h, w in ((300, 500), (37, 2000), (1080, 1920)):
            recipe = {"make": "png", "h": h, "w": w, "seed": h * w, "kind": "noise"}
            yield case(f"dir-{name}-{h}x{w}", recipe, phi4_reference(d, [build_input(recipe)]),
                       {"preprocessor_config": d})


PHI3V_PRESETS = {"microsoft/Phi-3-vision-128k-instruct": 16, "microsoft/Phi-3.5-vision-instruct": 4}
PHI3V_SIZES = [(1, 1), (13, 7), (7, 13), (1, 2000), (3000, 20), (300, 500), (500, 300), (336, 336), (337, 336),
               (1000, 40), (40, 1000), (999, 777), (1008, 1680), (1344, 1344), (2000, 3000)]


def phi3v_fixture_reference(raws: list[bytes], num_crops: int, mean, std) -> dict[str, np.ndarray]:
    """tests/phi_reference.phi3v_reference (the published remote code, transcribed) and
    the expanded ids of its layout (<|image_k|> -> 32044 x num_img_tokens)."""
    _torch()
    from phi_reference import phi3v_expected_ids, phi3v_reference

    out = phi3v_reference(raws, num_crops, mean, std)
    _, ids = phi3v_expected_ids(len(raws), out["num_img_tokens"].tolist(), 32044)
    out["input_ids"] = np.asarray(ids, dtype=np.int64)
    return out


@fixture_set("phi3v")
def phi3v_set():
    """Phi-3-vision / Phi-3.5-vision from tests/phi_reference.phi3v_reference, an
    independent transcription of Microsoft's published Phi3VImageProcessor (PIL
    transpose/resize/pad, torchvision ToTensor + Normalize, torch F.interpolate bicubic),
    for both presets (num_crops 16 and 4): tiny, thin (refused sizes excluded), odd,
    exact-fit and large sizes, Pillow modes, one three-image request; a model directory
    with num_crops 9 and other statistics. Outputs: pixel_values, image_sizes,
    num_img_tokens, input_ids (prompt: tests/phi_reference.phi3v_expected_ids)."""
    sys.path.insert(0, str(ROOT))
    from sglang_mm_grpc.config import resolve
    from sglang_mm_grpc.families import phi3v

    for preset, n in PHI3V_PRESETS.items():
        pre = resolve(preset).preprocessor_config
        tag = preset.split("/")[1]
        mean, std = pre["image_mean"], pre["image_std"]
        for h, w in PHI3V_SIZES:
            if phi3v.hd_geometry(h, w, n).resized_h == 0:
                continue
            kind = "noise" if h * w < 400_000 else "smooth"
            recipe = {"make": "png" if h * w < 1_000_000 else "jpeg", "h": h, "w": w, "seed": 2 * h + w, "kind": kind}
            yield case(f"{tag}-{h}x{w}-{kind}", recipe, phi3v_fixture_reference([build_input(recipe)], n, mean, std),
                       {"model": preset})
        for name in ("png_rgba", "jpeg_cmyk", "jpeg_exif_orientation_8", "png_1"):
            recipe = {"make": "mode", "name": name}
            yield case(f"{tag}-mode-{name}", recipe, phi3v_fixture_reference([build_input(recipe)], n, mean, std),
                       {"model": preset})
        items = [{"make": "png", "h": 336, "w": 672, "seed": 1, "kind": "noise"},
                 {"make": "jpeg", "h": 640, "w": 480, "seed": 2, "kind": "smooth"},
                 {"make": "png", "h": 30, "w": 3000, "seed": 3, "kind": "noise"}]
        recipe = {"make": "list", "items": items}
        yield case(f"{tag}-three-images", recipe, phi3v_fixture_reference(build_input(recipe), n, mean, std),
                   {"model": preset})
    d = {"image_processor_type": "Phi3VImageProcessor", "num_crops": 9, "image_mean": [0.5, 0.5, 0.5],
         "image_std": [0.25, 0.5, 0.125]}
    for h, w in ((300, 500), (37, 600), (1080, 1920)):
        recipe = {"make": "jpeg", "h": h, "w": w, "seed": h + w, "kind": "smooth"}
        yield case(f"dir-crops9-{h}x{w}", recipe,
                   phi3v_fixture_reference([build_input(recipe)], 9, d["image_mean"], d["image_std"]),
                   {"preprocessor_config": d})


INKLING_PRESET = "thinkingmachines/Inkling"
INKLING2_PRESET = "thinkingmachines/Inkling-2-Small-MXFP8"
INKLING_SIZES = [(1, 1), (13, 7), (39, 39), (40, 40), (41, 41), (40, 80), (80, 40), (79, 121), (300, 500), (500, 300),
                 (1, 2000), (2000, 1), (20, 3000), (999, 777)]
INKLING_MODES = ("png_rgba", "png_p_transparency", "png_la", "gif_transparent", "webp_lossless_rgba",
                 "png_rgba_exif_orientation_6", "jpeg_cmyk", "jpeg_exif_orientation_6", "gif_animated")
INKLING_DIRS = {
    "2x-cap-2048": {"rescale_image_frac": 2.0, "rescale_image_max_upscaled_long_edge": 2048},
    "1.5x-no-cap": {"rescale_image_frac": 1.5, "rescale_image_max_upscaled_long_edge": None},
    "0.37x": {"rescale_image_frac": 0.37},
    "bicubic-2x": {"rescale_image_frac": 2.0, "resample": 3},
    "1.25x-other-stats": {"rescale_image_frac": 1.25, "image_mean": [0.5, 0.25, 0.75], "image_std": [0.2, 0.3, 0.4]},
}
INKLING2_DIRS = {
    "patch-20x30": {"size": {"height": 20, "width": 30}},
    "clip-stats": {"image_mean": [0.48145466, 0.4578275, 0.40821073],
                   "image_std": [0.26862954, 0.26130258, 0.27577711]},
}


def inkling_fixture_reference(pre: dict, raws: list[bytes], version: int) -> dict[str, np.ndarray]:
    """transformers' InklingImageProcessor (version 1) or Inkling2ImageProcessor (2) outputs,
    and the processor's ids for tests/reference.inkling_prompt (words around one
    <|unused_200054|> per image, after a <|content_image|> marker for version 1)."""
    _torch()
    from reference import inkling_prompt, inkling_reference, reference_input, run_torch_reference

    proc = inkling_reference(pre, version=version)
    out = run_torch_reference(proc.image_processor, raws)
    text, _ = inkling_prompt(len(raws), marker=version == 1)
    ids = proc(images=[reference_input(r) for r in raws], text=[text], return_tensors="pt")
    out["input_ids"] = ids["input_ids"][0].numpy()
    return out


def _inkling_cases(preset: str, version: int, sizes, dirs: dict):
    from sglang_mm_grpc.config import resolve

    src = resolve(preset)
    pre, params = src.preprocessor_config, {"model": preset}
    for h, w in sizes:
        for kind in ("noise", "smooth"):
            recipe = {"make": "png", "h": h, "w": w, "seed": h * 5 + w, "kind": kind}
            yield case(f"{h}x{w}-{kind}", recipe, inkling_fixture_reference(pre, [build_input(recipe)], version), params)
    for name in INKLING_MODES:
        recipe = {"make": "mode", "name": name}
        yield case(f"mode-{name}", recipe, inkling_fixture_reference(pre, [build_input(recipe)], version), params)
    items = [{"make": "png", "h": 40 + 137 * i, "w": 600 - 113 * i, "seed": i, "kind": "noise"} for i in range(4)]
    items += [{"make": "jpeg", "h": 300, "w": 500, "seed": 9, "kind": "smooth"}, {"make": "mode", "name": "png_rgba"}]
    recipe = {"make": "list", "items": items}
    yield case("six-images", recipe, inkling_fixture_reference(pre, build_input(recipe), version), params)
    recipe = {"make": "jpeg", "h": 2000, "w": 3000, "seed": 3, "kind": "smooth"}
    yield case("2000x3000-jpeg", recipe, inkling_fixture_reference(pre, [build_input(recipe)], version), params)
    for name, extra in dirs.items():
        d = {**pre, **extra}
        for h, w in ((300, 500), (37, 2000), (13, 7), (1080, 1920)):
            recipe = {"make": "png", "h": h, "w": w, "seed": h + w, "kind": "noise"}
            yield case(f"dir-{name}-{h}x{w}", recipe, inkling_fixture_reference(d, [build_input(recipe)], version),
                       {"preprocessor_config": d, "config": src.config})


@fixture_set("inkling")
def inkling_set():
    """transformers' InklingImageProcessor (torchvision, CPU) and InklingProcessor ids
    (word tokenizer holding the Inkling special tokens; prompt from
    tests/reference.inkling_prompt, a <|content_image|> marker before each placeholder) for
    the thinkingmachines/Inkling preset (no rescale): tiny, thin, odd and 40-px-grid
    sizes, noise and smooth; Pillow modes with alpha, palette, CMYK, EXIF; a six-image
    request; a 2000x3000 JPEG; model directories that rescale (2x capped at 2048, as SGLang
    serves; 1.5x uncapped; 0.37x down; bicubic; other statistics), resizing with torch's
    uint8 Lanczos. Outputs: pixel_values (digest), num_patches, input_ids."""
    yield from _inkling_cases(INKLING_PRESET, 1, INKLING_SIZES, INKLING_DIRS)


@fixture_set("inkling2")
def inkling2_set():
    """transformers' Inkling2ImageProcessor (torchvision, CPU) and Inkling2Processor ids
    (word tokenizer; prompt from tests/reference.inkling_prompt without markers) for the
    thinkingmachines/Inkling-2-Small-MXFP8 preset: the same sizes and modes as the inkling
    set (those with alpha composited onto the processor's checkerboard), a six-image
    request, a 2000x3000 JPEG, and model directories with 20x30 patches and CLIP
    statistics. Outputs: pixel_values (digest), image_grid_thw, input_ids."""
    yield from _inkling_cases(INKLING2_PRESET, 2, INKLING_SIZES, INKLING2_DIRS)


# -- command line -------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="*", help="set names (default: all)")
    parser.add_argument("--check", action="store_true", help="regenerate in memory and compare with the committed files")
    parser.add_argument("--list", action="store_true", help="list the sets")
    args = parser.parse_args(argv)
    if args.list:
        for name, fn in SETS.items():
            print(f"{name}: {' '.join((fn.__doc__ or '').split())[:100]}")
        return 0
    names = args.sets or list(SETS)
    unknown = [n for n in names if n not in SETS]
    if unknown:
        parser.error(f"unknown set(s) {', '.join(unknown)}; known: {', '.join(SETS)}")
    fixtures.FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    status = 0
    for name in names:
        doc = generate(name)
        path = fixtures.path(name)
        if args.check:
            old = json.loads(path.read_text()) if path.exists() else {"cases": []}
            same = old["cases"] == doc["cases"]
            print(f"{name}: {'up to date' if same else 'DIFFERS'} ({len(doc['cases'])} cases)")
            status |= not same
        else:
            path.write_text(dump(doc))
            print(f"{name}: {len(doc['cases'])} cases -> {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    return status


if __name__ == "__main__":
    sys.exit(main())
