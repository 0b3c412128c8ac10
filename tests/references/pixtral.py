"""Pixtral-12B and Mistral-Small-3.1: the real ``PixtralProcessor`` over
``PixtralImageProcessorPil``, with a word-level tokenizer holding the Tekken special
tokens (the Tekken tokenizer itself cannot be downloaded here)."""

from __future__ import annotations

from references.common import WORDS, init_kwargs


def reference(preprocessor_config: dict, processor_config: dict, token_ids: dict[str, int] | None = None):
    """The real ``PixtralProcessor`` over ``PixtralImageProcessorPil``, built as
    ``from_pretrained`` builds it (processor_config.json values are its init kwargs).

    transformers hides PixtralProcessor without torch only because its module imports
    ``get_resize_output_image_size`` from the torchvision image processor; the PIL module
    holds the same function, so the class's own source is loaded with that one import
    served from there. The tokenizer is a word-level one whose special tokens carry
    ``token_ids`` (by default the family's ``TEKKEN_IDS``).
    """
    from transformers.models.pixtral import image_processing_pil_pixtral as pil

    if token_ids is None:
        from sglang_mm_grpc.families.pixtral import TEKKEN_IDS as token_ids

    processor_class = _processor_class()
    tokenizer = _tokenizer(token_ids)
    image_processor = pil.PixtralImageProcessorPil(**init_kwargs(preprocessor_config))
    return processor_class(image_processor=image_processor, tokenizer=tokenizer, **init_kwargs(processor_config))


def processor(src):
    return reference(src.preprocessor_config, src.processor_config)


def _processor_class():
    """``PixtralProcessor``, loaded from its source without torch (see ``reference``)."""
    import importlib.util
    import sys
    import types

    from transformers.models.pixtral import image_processing_pil_pixtral as pil

    name = "transformers.models.pixtral._processing_pixtral_reference"
    if name not in sys.modules:
        helper = types.ModuleType("transformers.models.pixtral.image_processing_pixtral")
        helper.get_resize_output_image_size = pil.get_resize_output_image_size
        sys.modules.setdefault(helper.__name__, helper)
        spec = importlib.util.spec_from_file_location(name, pil.__file__.replace("image_processing_pil_", "processing_"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].PixtralProcessor


def _tokenizer(token_ids: dict[str, int]):
    """Word-level: fillers up to the largest special id, the special tokens at their ids,
    ``<unk>`` at 0 and the words after them all."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<filler_{i}>": i for i in range(max(token_ids.values()) + 1)}
    vocab = {v: k for k, v in vocab.items()}
    vocab.update({i: t for t, i in token_ids.items()})
    vocab[0] = "<unk>"
    vocab.update({len(vocab) + i: w for i, w in enumerate(WORDS)})
    wordlevel = Tokenizer(models.WordLevel({t: i for i, t in vocab.items()}, unk_token="<unk>"))
    wordlevel.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=wordlevel, unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(token_ids)})
    assert tokenizer.convert_tokens_to_ids(list(token_ids)) == list(token_ids.values())
    return tokenizer
