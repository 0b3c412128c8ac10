"""Llama 4: the real ``Llama4Processor`` over ``Llama4ImageProcessor`` (torchvision; needs
torch), with a word-level tokenizer holding Llama 4's special-token ids (the Llama 4
tokenizer cannot be downloaded here); and the ``llama4`` fixture set."""

from __future__ import annotations

import numpy as np

from references.common import (build_input, case, init_kwargs, load_torch, reference_input, run_torch_reference,
                               special_word_tokenizer)


def reference(preprocessor_config: dict, processor_config: dict, token_ids: dict[str, int] | None = None):
    """The real ``Llama4Processor`` over ``Llama4ImageProcessor``, built as
    ``from_pretrained`` builds it, with ``special_word_tokenizer(token_ids)`` (by default
    the family's ``LLAMA4_IDS``): the words' ids follow the largest special id."""
    from transformers import Llama4ImageProcessor, Llama4Processor

    if token_ids is None:
        from sglang_mm_grpc.families.llama4 import LLAMA4_IDS as token_ids

    tokenizer = special_word_tokenizer(token_ids)
    image_processor = Llama4ImageProcessor(**init_kwargs(preprocessor_config))
    return Llama4Processor(image_processor=image_processor, tokenizer=tokenizer, **init_kwargs(processor_config))


def processor(src):
    return reference(src.preprocessor_config, src.processor_config)


# -- the llama4 fixture set -----------------------------------------------------------------

PRESET = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
SIZES = [(1, 1), (13, 7), (100, 100), (300, 500), (335, 336), (336, 336), (337, 336), (336, 672),
         (673, 672), (999, 777), (1008, 1008), (1342, 2464), (1, 2000), (3000, 20), (336, 5376)]
# Model directories with non-default settings (filters, canvases, tile size, value paths).
DIRS = {
    "bicubic-max-canvas-4": {"resample": 3, "max_patches": 4, "resize_to_max_canvas": True},
    "tile224-clip-stats": {"size": {"height": 224, "width": 224}, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                           "image_std": [0.26862954, 0.26130258, 0.27577711], "max_patches": 6},
    "lanczos-rescale-only": {"resample": 1, "do_normalize": False, "rescale_factor": 0.0137},
    "nearest-no-rescale": {"resample": 0, "do_normalize": False, "do_rescale": False, "max_patches": 8},
}


def fixture_outputs(preprocessor_config: dict, processor_config: dict, raws: list[bytes]) -> dict[str, np.ndarray]:
    """transformers' Llama4ImageProcessor (bf16 pixel_values as float32, exact) and the
    Llama4Processor's ids for a prompt of one <|image|> per image (the expansions back to
    back), with a word tokenizer holding Llama 4's special-token ids."""
    load_torch()
    proc = reference(preprocessor_config, processor_config)
    out = run_torch_reference(proc.image_processor, raws)
    ratios = out["aspect_ratios"]
    ids = proc(images=[reference_input(r) for r in raws], text=["<|image|>" * len(raws)], return_tensors="pt")
    return {
        "pixel_values": out["pixel_values"],
        "aspect_ratios": ratios,
        "patches_per_image": np.array([r * c + (r * c > 1) for r, c in ratios.tolist()], dtype=np.int64),
        "input_ids": ids["input_ids"][0].numpy(),
    }


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

    src = resolve(PRESET)
    pre, proc = src.preprocessor_config, src.processor_config
    params = {"model": PRESET}
    for h, w in SIZES:
        for kind in ("noise", "smooth") if h * w <= 1_000_000 else ("noise",):
            recipe = {"make": "png", "h": h, "w": w, "seed": h * 7 + w, "kind": kind}
            yield case(f"scout-{h}x{w}-{kind}", recipe, fixture_outputs(pre, proc, [build_input(recipe)]), params)
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
                   fixture_outputs(pre, proc, [build_input(recipe)]), params)
    for name in ("png_rgba", "png_p_transparency", "jpeg_cmyk", "jpeg_exif_orientation_6", "png_la", "gif_animated"):
        recipe = {"make": "mode", "name": name}
        yield case(f"scout-mode-{name}", recipe, fixture_outputs(pre, proc, [build_input(recipe)]), params)
    items = [{"make": "png", "h": 40 + 337 * i, "w": 900 - 173 * i, "seed": i, "kind": "noise"} for i in range(4)]
    items += [{"make": "png", "h": 300, "w": 500, "seed": 9, "kind": "smooth"}, {"make": "mode", "name": "png_rgba"}]
    recipe = {"make": "list", "items": items}
    yield case("scout-six-images", recipe, fixture_outputs(pre, proc, build_input(recipe)), params)
    recipe = {"make": "jpeg", "h": 2000, "w": 3000, "seed": 3, "kind": "smooth"}
    yield case("scout-2000x3000-jpeg", recipe, fixture_outputs(pre, proc, [build_input(recipe)]), params)
    for name, dir_pre in DIRS.items():
        for h, w in ((300, 500), (37, 2000), (13, 7), (1080, 1920)):
            recipe = {"make": "png", "h": h, "w": w, "seed": h + w, "kind": "noise"}
            yield case(f"dir-{name}-{h}x{w}", recipe, fixture_outputs(dir_pre, {}, [build_input(recipe)]),
                       {"preprocessor_config": dir_pre, "config": {"model_type": "llama4"}})


FIXTURE_SETS = {"llama4": llama4_set}
