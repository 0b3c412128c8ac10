"""Qwen2-VL / Qwen2.5-VL / Qwen3-VL: ``Qwen2VLImageProcessorPil`` (the default
processor), and ``Qwen2VLImageProcessor`` (torchvision, needs torch) for the
``torchvision`` processor and the ``qwen_torchvision`` fixture set."""

from __future__ import annotations

import numpy as np

from references.common import build_input, case, init_kwargs, load_torch, run_reference


def reference(preprocessor_config: dict):
    """The real ``Qwen2VLImageProcessorPil``."""
    from transformers import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(**init_kwargs(preprocessor_config))


def processor(src):
    return reference(src.preprocessor_config)


def torchvision_reference(preprocessor_config: dict):
    """The real ``Qwen2VLImageProcessor`` (torchvision backend; needs torch)."""
    from transformers import Qwen2VLImageProcessor

    return Qwen2VLImageProcessor(**init_kwargs(preprocessor_config))


# -- the qwen_torchvision fixture set -------------------------------------------------------

PRESETS = ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
SIZES = [(1, 1), (13, 7), (28, 28), (55, 57), (56, 56), (101, 333), (300, 500), (448, 448), (999, 777),
         (1080, 1920), (3000, 20), (20, 3000), (224, 4000)]
# Model directories with non-default settings (the torchvision filters other than bicubic).
DIRS = {
    "bilinear-half": {"min_pixels": 4096, "max_pixels": 409600, "resample": 2, "image_mean": [0.5, 0.5, 0.5],
                      "image_std": [0.5, 0.5, 0.5]},
    "lanczos-patch16": {"min_pixels": 1024, "max_pixels": 1048576, "patch_size": 16, "resample": 1},
    "nearest": {"resample": 0, "max_pixels": 250000, "min_pixels": 100000},
    "temporal1-no-normalize": {"temporal_patch_size": 1, "do_normalize": False, "max_pixels": 300000},
}


def torchvision_outputs(preprocessor_config: dict, raws: list[bytes]) -> dict[str, np.ndarray]:
    """The real Qwen2VLImageProcessor (torchvision class) on ``common.reference_input``."""
    load_torch()
    return run_reference(torchvision_reference(preprocessor_config), raws)


def qwen_torchvision_set():
    """transformers' Qwen2VLImageProcessor (torchvision backend, CPU) on PNG/JPEG bytes
    from imagegen: the Qwen2-VL and Qwen3-VL presets over tiny, thin, odd, on-grid and
    HD sizes with noise and smooth content, a few Pillow modes, one multi-image request
    and one large JPEG; model directories with bilinear, lanczos, nearest and no-normalize
    settings. Outputs: pixel_values (digest) and image_grid_thw."""
    from sglang_mm_grpc.config import resolve

    for preset in PRESETS:
        pre = resolve(preset).preprocessor_config
        tag = preset.split("/")[1]
        for h, w in SIZES:
            for kind in ("noise", "smooth"):
                recipe = {"make": "png", "h": h, "w": w, "seed": h * 7 + w, "kind": kind}
                ref = torchvision_outputs(pre, [build_input(recipe)])
                yield case(f"{tag}-{h}x{w}-{kind}", recipe, ref, {"model": preset})
        for name in ("png_rgba", "png_p_transparency", "jpeg_cmyk", "jpeg_exif_orientation_6", "png_la"):
            recipe = {"make": "mode", "name": name}
            yield case(f"{tag}-mode-{name}", recipe, torchvision_outputs(pre, [build_input(recipe)]),
                       {"model": preset})
        items = [{"make": "png", "h": 40 + 37 * i, "w": 300 - 23 * i, "seed": i, "kind": "noise"} for i in range(4)]
        items.append({"make": "jpeg", "h": 480, "w": 640, "seed": 0, "kind": "smooth"})
        recipe = {"make": "list", "items": items}
        yield case(f"{tag}-five-images", recipe, torchvision_outputs(pre, build_input(recipe)), {"model": preset})
    recipe = {"make": "jpeg", "h": 2000, "w": 3000, "seed": 3, "kind": "smooth"}
    pre = resolve(PRESETS[0]).preprocessor_config
    yield case("Qwen2-VL-7B-Instruct-2000x3000-jpeg", recipe, torchvision_outputs(pre, [build_input(recipe)]),
               {"model": PRESETS[0]})
    for name, pre in DIRS.items():
        for h, w in ((300, 500), (37, 2000), (13, 7), (1080, 1920)):
            recipe = {"make": "png", "h": h, "w": w, "seed": h + w, "kind": "noise"}
            yield case(f"dir-{name}-{h}x{w}", recipe, torchvision_outputs(pre, [build_input(recipe)]),
                       {"preprocessor_config": pre})


FIXTURE_SETS = {"qwen_torchvision": qwen_torchvision_set}
