#!/usr/bin/env python
"""Write the committed reference fixtures, ``tests/fixtures/<set>.json``, from the real
torch / torchvision / transformers code, so machines without torch (CI) still check the
torch-exact paths bit for bit.

Run where torch is installed next to the project's test extra:

    python scripts/gen_fixtures.py                    # every set
    python scripts/gen_fixtures.py qwen_torchvision   # some sets
    python scripts/gen_fixtures.py --check            # compare with the committed files
    python scripts/gen_fixtures.py --list

Adding a set is one function, a generator of cases::

    def my_set():
        \"\"\"What it covers and how its cases are chosen (seeds, sizes).\"\"\"
        for ...:
            recipe = {"make": "png", "h": 300, "w": 500, "seed": 1, "kind": "noise"}
            raw = build_input(recipe)                # tests/fixtures.build_input
            yield case("300x500-noise", recipe, {"pixel_values": reference(raw)}, params={...})

A family's sets belong to its reference module, ``tests/references/<family>.py``, in its
``FIXTURE_SETS`` (set name -> function), which this script finds by the module's name
(``case`` and ``build_input`` are in ``references.common``). The sets of no family (the
kernels': resampling, bfloat16, lookup tables) are here, each registered with
``@fixture_set("my_set")``.

Inputs are never stored, only their recipe (``tests/fixtures.build_input``) and a digest
proving the test rebuilt the same input; outputs are stored as shape, dtype and sha256
(plus the values when small). Case lists come from fixed seeds, so a rerun with the same
library versions rewrites identical files. The consuming test reads the set with
``tests/fixtures.py`` (``params(name)``, ``case_input(case)``, ``assert_output``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]  # the test helpers, and the package where it is not installed

import fixtures  # noqa: E402  (tests/fixtures.py: recipes, digests, paths)
from fixtures import build_input  # noqa: E402
from references.common import case, load_torch  # noqa: E402  (tests/references: the parity references)

#: name -> generator function; filled by @fixture_set and register_family_sets.
SETS: dict[str, Callable[[], Iterable[dict]]] = {}


def fixture_set(name: str):
    """Register a generator of cases under ``name`` (its docstring is stored as the doc)."""

    def register(fn):
        if name in SETS:
            raise ValueError(f"fixture set {name!r} defined twice")
        SETS[name] = fn
        return fn

    return register


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


def tv_resize_u8(img: np.ndarray, out_h: int, out_w: int, mode: str) -> np.ndarray:
    """torchvision's resize of an HWC (or HW) uint8 array, returned in the same layout."""
    torch = load_torch()
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
    torch = load_torch()
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
    torch = load_torch()
    return torch.from_numpy(build_input(LUT_INPUT)).reshape(1, 3, 16, 16)


@fixture_set("bf16")
def bf16_set():
    """torch float32 -> bfloat16 (.to(torch.bfloat16)) on special values and on 4096
    random bit patterns (recipe float32_bits, seed 4000), and transformers'
    Llama4ImageProcessor.rescale_and_normalize of every uint8 value for several
    mean/std/factor configurations and each do_rescale/do_normalize combination that runs."""
    torch = load_torch()
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


# -- the families' sets -------------------------------------------------------------------

#: One reference module per family, ``tests/references/<family>.py``, and the shared
#: ``common.py``.
REFERENCES = ROOT / "tests" / "references"


def family_modules() -> list[str]:
    """The names of the family reference modules."""
    return sorted(p.stem for p in REFERENCES.glob("*.py") if p.stem not in ("__init__", "common"))


def register_family_sets() -> None:
    """Each family's sets: the ``FIXTURE_SETS`` of ``references.<family>``, if it has any."""
    for family in family_modules():
        module = importlib.import_module(f"references.{family}")
        for name, fn in getattr(module, "FIXTURE_SETS", {}).items():
            fixture_set(name)(fn)


register_family_sets()


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
