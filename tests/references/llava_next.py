"""LLaVA-NeXT (v1.6): the real ``LlavaNextProcessor`` over ``LlavaNextImageProcessorPil``,
with LLaVA's word-level tokenizer and prompts (``references.llava``)."""

from __future__ import annotations

from references.llava import IMAGE, build, word_prompt

__all__ = ["IMAGE", "processor", "reference", "word_prompt"]


def reference(preprocessor_config: dict, processor_config: dict, image_token_id: int = IMAGE):
    """The real ``LlavaNextProcessor`` as ``from_pretrained`` builds it (see
    ``references.llava.reference``)."""
    import transformers

    return build(transformers.LlavaNextProcessor, transformers.LlavaNextImageProcessorPil, preprocessor_config,
                 processor_config, image_token_id)


def processor(src):
    return reference(src.preprocessor_config, src.processor_config)
