"""Inkling 2: the real ``Inkling2Processor`` over ``Inkling2ImageProcessor`` (torchvision, so
it needs torch), with Inkling's word tokenizer (``references.inkling.TOKENS``); its
prompt (Inkling's, without markers); and the ``inkling2`` fixture set (Inkling's cases)."""

from __future__ import annotations

from references import inkling
from references.common import init_kwargs, special_word_tokenizer


def reference(preprocessor_config: dict):
    """The real ``Inkling2Processor`` over ``Inkling2ImageProcessor``, with
    ``special_word_tokenizer(inkling.TOKENS)``."""
    import transformers

    kwargs = init_kwargs(preprocessor_config)
    tokenizer = special_word_tokenizer(inkling.TOKENS)
    return transformers.Inkling2Processor(image_processor=transformers.Inkling2ImageProcessor(**kwargs),
                                          tokenizer=tokenizer)


def processor(src):
    return reference(src.preprocessor_config)


def prompt(n_images: int) -> tuple[str, list[int]]:
    """``inkling.prompt`` without the ``<|content_image|>`` markers."""
    return inkling.prompt(n_images, marker=False)


# -- the inkling2 fixture set ---------------------------------------------------------------

PRESET = "thinkingmachines/Inkling-2-Small-MXFP8"
DIRS = {
    "patch-20x30": {"size": {"height": 20, "width": 30}},
    "clip-stats": {"image_mean": [0.48145466, 0.4578275, 0.40821073],
                   "image_std": [0.26862954, 0.26130258, 0.27577711]},
}


def inkling2_set():
    """transformers' Inkling2ImageProcessor (torchvision, CPU) and Inkling2Processor ids
    (word tokenizer; prompt from tests/references/inkling.prompt without markers) for the
    thinkingmachines/Inkling-2-Small-MXFP8 preset: the same sizes and modes as the inkling
    set (those with alpha composited onto the processor's checkerboard), a six-image
    request, a 2000x3000 JPEG, and model directories with 20x30 patches and CLIP
    statistics. Outputs: pixel_values (digest), image_grid_thw, input_ids."""
    yield from inkling.fixture_cases(PRESET, reference, False, DIRS)


FIXTURE_SETS = {"inkling2": inkling2_set}
