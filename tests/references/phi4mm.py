"""Phi-4-multimodal: the real ``Phi4MultimodalProcessor`` (``Phi4MultimodalImageProcessor``,
torchvision, so it needs torch; its audio feature extractor; and a word-level tokenizer
whose ``image_token`` is ``<|endoftext10|>``: the checkpoint's tokenizer cannot be
downloaded here); and the ``phi4`` fixture set."""

from __future__ import annotations

import numpy as np

from references.common import WORDS, build_input, case, init_kwargs, load_torch, reference_input

PHI4_IMAGE, PHI4_AUDIO = 200010, 200011


def reference(preprocessor_config: dict, image_token_id: int = PHI4_IMAGE):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (Phi4MultimodalFeatureExtractor, Phi4MultimodalImageProcessor, Phi4MultimodalProcessor,
                              PreTrainedTokenizerFast)

    vocab = {"<unk>": 0, "<|endoftext10|>": image_token_id, "<|endoftext11|>": image_token_id + 1}
    vocab.update({w: image_token_id + 2 + i for i, w in enumerate(WORDS)})
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="<unk>",
        extra_special_tokens={"image_token": "<|endoftext10|>", "audio_token": "<|endoftext11|>"})
    image_processor = Phi4MultimodalImageProcessor(**init_kwargs(preprocessor_config))
    return Phi4MultimodalProcessor(image_processor=image_processor, audio_processor=Phi4MultimodalFeatureExtractor(),
                                   tokenizer=tokenizer)


def processor(src):
    return reference(src.preprocessor_config)


def prompt(n_images: int, image_token_id: int = PHI4_IMAGE) -> tuple[str, list[int]]:
    """Words and ``n_images`` ``<|endoftext10|>``: as text, and as the unexpanded ids."""
    words = [WORDS[i % len(WORDS)] for i in range(n_images + 1)]
    text = [words[0]] + [t for w in words[1:] for t in ("<|endoftext10|>", w)]
    vocab = {w: image_token_id + 2 + i for i, w in enumerate(WORDS)} | {"<|endoftext10|>": image_token_id}
    return " ".join(text), [vocab[t] for t in text]


# -- the phi4 fixture set -------------------------------------------------------------------

PRESET = "microsoft/Phi-4-multimodal-instruct"
SIZES = [(1, 1), (13, 7), (10, 3000), (3000, 20), (300, 500), (500, 300), (448, 448), (449, 448), (999, 777),
         (1000, 700), (448, 1741), (1292, 896), (200, 16128), (449, 8512), (3136, 3136),
         (4000, 3000), (20, 16000)]


def fixture_outputs(pre: dict, raws: list[bytes]) -> dict[str, np.ndarray]:
    """The real Phi4MultimodalProcessor (image processor + word-level tokenizer): the
    image processor's outputs and the expanded ids of "hello <image> world ..."."""
    load_torch()
    proc = reference(pre)
    images = [reference_input(r) for r in raws]
    out = {k: np.asarray(v) for k, v in proc.image_processor(images, return_tensors="np").items()}
    text, _ = prompt(len(raws))
    out["input_ids"] = np.asarray(proc(text=text, images=images, return_tensors="np")["input_ids"][0])
    return out


def phi4_set():
    """transformers' Phi4MultimodalImageProcessor (torchvision, CPU) and the expanded ids of
    Phi4MultimodalProcessor (word-level tokenizer, <|endoftext10|> = 200010; prompt from
    tests/references/phi4mm.prompt) for the Phi-4-multimodal preset: tiny, thin, odd,
    padded grids of every orientation, grids past dynamic_hd (closest-aspect search), a
    large JPEG, Pillow modes, and one three-image request (batch padding with ones masks);
    a model directory with dynamic_hd 4 and size 224 / patch 16. Outputs:
    image_pixel_values, image_sizes, image_attention_mask, num_img_tokens, input_ids."""
    from sglang_mm_grpc.config import resolve

    pre = resolve(PRESET).preprocessor_config
    for h, w in SIZES:
        kind = "noise" if h * w < 400_000 else "smooth"
        recipe = {"make": "png" if h * w < 1_000_000 else "jpeg", "h": h, "w": w, "seed": h + 3 * w, "kind": kind}
        yield case(f"{h}x{w}-{kind}", recipe, fixture_outputs(pre, [build_input(recipe)]), {"model": PRESET})
    for name in ("png_rgba", "png_p_transparency", "jpeg_cmyk", "jpeg_exif_orientation_6", "png_la", "gif_animated"):
        recipe = {"make": "mode", "name": name}
        yield case(f"mode-{name}", recipe, fixture_outputs(pre, [build_input(recipe)]), {"model": PRESET})
    items = [{"make": "png", "h": 300, "w": 500, "seed": 1, "kind": "noise"},
             {"make": "jpeg", "h": 1000, "w": 700, "seed": 2, "kind": "smooth"},
             {"make": "png", "h": 13, "w": 7, "seed": 3, "kind": "noise"}]
    recipe = {"make": "list", "items": items}
    yield case("three-images", recipe, fixture_outputs(pre, build_input(recipe)), {"model": PRESET})
    for name, extra in {"dynamic-hd-4": {"dynamic_hd": 4},
                        "size224-patch16": {"size": {"height": 224, "width": 224}, "patch_size": 16}}.items():
        d = dict(pre) | extra
        for h, w in ((300, 500), (37, 2000), (1080, 1920)):
            recipe = {"make": "png", "h": h, "w": w, "seed": h * w, "kind": "noise"}
            yield case(f"dir-{name}-{h}x{w}", recipe, fixture_outputs(d, [build_input(recipe)]),
                       {"preprocessor_config": d})


FIXTURE_SETS = {"phi4": phi4_set}
