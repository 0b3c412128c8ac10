"""Inkling: the real ``InklingProcessor`` over ``InklingImageProcessor`` (torchvision, so it
needs torch) and its audio feature extractor, which the class requires, with a word
tokenizer holding the Inkling special tokens (``TOKENS``; the tokenizer itself cannot be
downloaded here); the prompts; and the ``inkling`` fixture set. Inkling 2
(``references.inkling2``) shares the tokens, the prompts and the fixture cases."""

from __future__ import annotations

import numpy as np

from references.common import (WORDS, build_input, case, init_kwargs, load_torch, reference_input,
                               run_torch_reference, special_word_ids, special_word_tokenizer)

#: The Inkling tokenizer's special tokens the processors look up: image placeholder,
#: audio placeholder and their markers.
TOKENS = {
    "<|unused_200054|>": 200054,
    "<|unused_200053|>": 200053,
    "<|content_image|>": 200005,
    "<|content_audio_input|>": 200020,
}


def reference(preprocessor_config: dict):
    """The real ``InklingProcessor`` over ``InklingImageProcessor``, with
    ``special_word_tokenizer(TOKENS)``."""
    import transformers
    from transformers.models.inkling.feature_extraction_inkling import InklingFeatureExtractor

    kwargs = init_kwargs(preprocessor_config)
    tokenizer = special_word_tokenizer(TOKENS)
    return transformers.InklingProcessor(feature_extractor=InklingFeatureExtractor(),
                                         image_processor=transformers.InklingImageProcessor(**kwargs),
                                         tokenizer=tokenizer)


def processor(src):
    return reference(src.preprocessor_config)


def prompt(n_images: int, marker: bool = True) -> tuple[str, list[int]]:
    """Words around ``n_images`` image placeholders, each after its ``<|content_image|>``
    marker as the chat template renders it (``marker`` False: Inkling 2, no marker), as
    text for the processor and as the unexpanded ids a gateway sends."""
    text, ids = [WORDS[0]], [word_ids()[WORDS[0]]]
    for i in range(n_images):
        if marker:
            text.append("<|content_image|>")
            ids.append(TOKENS["<|content_image|>"])
        word = WORDS[(i + 1) % len(WORDS)]
        text += ["<|unused_200054|>", word]
        ids += [TOKENS["<|unused_200054|>"], word_ids()[word]]
    return " ".join(text), ids


def word_ids() -> dict[str, int]:
    """The ids ``special_word_tokenizer(TOKENS)`` gives ``WORDS``."""
    return special_word_ids(TOKENS)


# -- the inkling fixture set (its cases shared with inkling2's) ------------------------------

PRESET = "thinkingmachines/Inkling"
SIZES = [(1, 1), (13, 7), (39, 39), (40, 40), (41, 41), (40, 80), (80, 40), (79, 121), (300, 500), (500, 300),
         (1, 2000), (2000, 1), (20, 3000), (999, 777)]
MODES = ("png_rgba", "png_p_transparency", "png_la", "gif_transparent", "webp_lossless_rgba",
         "png_rgba_exif_orientation_6", "jpeg_cmyk", "jpeg_exif_orientation_6", "gif_animated")
DIRS = {
    "2x-cap-2048": {"rescale_image_frac": 2.0, "rescale_image_max_upscaled_long_edge": 2048},
    "1.5x-no-cap": {"rescale_image_frac": 1.5, "rescale_image_max_upscaled_long_edge": None},
    "0.37x": {"rescale_image_frac": 0.37},
    "bicubic-2x": {"rescale_image_frac": 2.0, "resample": 3},
    "1.25x-other-stats": {"rescale_image_frac": 1.25, "image_mean": [0.5, 0.25, 0.75], "image_std": [0.2, 0.3, 0.4]},
}


def fixture_outputs(build, pre: dict, raws: list[bytes], marker: bool) -> dict[str, np.ndarray]:
    """The image processor's outputs of ``build(pre)`` (this module's ``reference`` or
    inkling2's), and the processor's ids for ``prompt`` (words around one
    <|unused_200054|> per image, after a <|content_image|> marker if ``marker``)."""
    load_torch()
    proc = build(pre)
    out = run_torch_reference(proc.image_processor, raws)
    text, _ = prompt(len(raws), marker=marker)
    ids = proc(images=[reference_input(r) for r in raws], text=[text], return_tensors="pt")
    out["input_ids"] = ids["input_ids"][0].numpy()
    return out


def fixture_cases(preset: str, build, marker: bool, dirs: dict):
    """The cases of the inkling and inkling2 sets: ``SIZES`` in both kinds, ``MODES``,
    six images, a 2000x3000 JPEG, and ``dirs``' model directories."""
    from sglang_mm_grpc.config import resolve

    def outputs(pre, raws):
        return fixture_outputs(build, pre, raws, marker)

    src = resolve(preset)
    pre, params = src.preprocessor_config, {"model": preset}
    for h, w in SIZES:
        for kind in ("noise", "smooth"):
            recipe = {"make": "png", "h": h, "w": w, "seed": h * 5 + w, "kind": kind}
            yield case(f"{h}x{w}-{kind}", recipe, outputs(pre, [build_input(recipe)]), params)
    for name in MODES:
        recipe = {"make": "mode", "name": name}
        yield case(f"mode-{name}", recipe, outputs(pre, [build_input(recipe)]), params)
    items = [{"make": "png", "h": 40 + 137 * i, "w": 600 - 113 * i, "seed": i, "kind": "noise"} for i in range(4)]
    items += [{"make": "jpeg", "h": 300, "w": 500, "seed": 9, "kind": "smooth"}, {"make": "mode", "name": "png_rgba"}]
    recipe = {"make": "list", "items": items}
    yield case("six-images", recipe, outputs(pre, build_input(recipe)), params)
    recipe = {"make": "jpeg", "h": 2000, "w": 3000, "seed": 3, "kind": "smooth"}
    yield case("2000x3000-jpeg", recipe, outputs(pre, [build_input(recipe)]), params)
    for name, extra in dirs.items():
        d = {**pre, **extra}
        for h, w in ((300, 500), (37, 2000), (13, 7), (1080, 1920)):
            recipe = {"make": "png", "h": h, "w": w, "seed": h + w, "kind": "noise"}
            yield case(f"dir-{name}-{h}x{w}", recipe, outputs(d, [build_input(recipe)]),
                       {"preprocessor_config": d, "config": src.config})


def inkling_set():
    """transformers' InklingImageProcessor (torchvision, CPU) and InklingProcessor ids
    (word tokenizer holding the Inkling special tokens; prompt from
    tests/references/inkling.prompt, a <|content_image|> marker before each placeholder) for
    the thinkingmachines/Inkling preset (no rescale): tiny, thin, odd and 40-px-grid
    sizes, noise and smooth; Pillow modes with alpha, palette, CMYK, EXIF; a six-image
    request; a 2000x3000 JPEG; model directories that rescale (2x capped at 2048, as SGLang
    serves; 1.5x uncapped; 0.37x down; bicubic; other statistics), resizing with torch's
    uint8 Lanczos. Outputs: pixel_values (digest), num_patches, input_ids."""
    yield from fixture_cases(PRESET, reference, True, DIRS)


FIXTURE_SETS = {"inkling": inkling_set}
