"""The parity reference: the installed transformers processors, fed as PARITY.md says."""

from __future__ import annotations

import io
import logging
import warnings

import numpy as np
from PIL import Image, ImageOps

logging.getLogger("transformers").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", module="transformers")


def reference_input(raw: bytes) -> Image.Image:
    """What the HF processor is handed: EXIF-transposed PIL image, first frame."""
    return ImageOps.exif_transpose(Image.open(io.BytesIO(raw)))


def qwen_reference(preprocessor_config: dict):
    from transformers import Qwen2VLImageProcessorPil

    cfg = {k: v for k, v in preprocessor_config.items() if k not in ("image_processor_type", "processor_class")}
    return Qwen2VLImageProcessorPil(**cfg)


def llava_reference(preprocessor_config: dict, processor_config: dict, image_token_id: int = 32000):
    """The real ``LlavaProcessor`` (LLaVA-1.5) or ``LlavaNextProcessor``, as
    ``from_pretrained`` builds it: the PIL image processor the config names, the
    processor_config.json values as init kwargs, and a word-level tokenizer in which
    ``<image>`` is ``image_token_id`` (the checkpoint's tokenizer cannot be downloaded).
    ``.image_processor`` is the pixel reference; calling it with text gives the ids."""
    import transformers

    kind = str(preprocessor_config.get("image_processor_type") or "CLIPImageProcessor")
    name = next(n for n in ("LlavaNext", "Llava", "CLIP") if kind.startswith(n))
    image_processor = getattr(transformers, f"{name}ImageProcessorPil")(
        **{k: v for k, v in preprocessor_config.items() if k not in ("image_processor_type", "processor_class")})
    processor_class = transformers.LlavaNextProcessor if name == "LlavaNext" else transformers.LlavaProcessor
    kwargs = {k: v for k, v in processor_config.items() if k != "processor_class"}
    return processor_class(image_processor=image_processor, tokenizer=_word_tokenizer(image_token_id), **kwargs)


WORDS = ("hello", "world", "describe", "these")


def word_prompt(n_images: int, image_token_id: int) -> tuple[str, list[int]]:
    """A prompt of words and ``n_images`` ``<image>`` placeholders, as text for
    ``llava_reference`` and as the unexpanded ids a gateway would send."""
    words = [WORDS[i % len(WORDS)] for i in range(n_images + 1)]
    text = [words[0]] + [t for w in words[1:] for t in ("<image>", w)]
    vocab = {w: image_token_id + 1 + i for i, w in enumerate(WORDS)} | {"<image>": image_token_id}
    return " ".join(text), [vocab[t] for t in text]


def _word_tokenizer(image_token_id: int):
    """Whitespace word-level tokenizer: ``<image>`` = ``image_token_id``, ``WORDS`` after it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<filler_{i}>": i for i in range(1, image_token_id)}
    vocab.update({"<unk>": 0, "<image>": image_token_id})
    vocab.update({w: image_token_id + 1 + i for i, w in enumerate(WORDS)})
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    return tokenizer


def pixtral_reference(preprocessor_config: dict, processor_config: dict, token_ids: dict[str, int]):
    """The real ``PixtralProcessor`` over ``PixtralImageProcessorPil``, built as
    ``from_pretrained`` builds it (processor_config.json values are its init kwargs).

    transformers hides PixtralProcessor without torch only because its module imports
    ``get_resize_output_image_size`` from the torchvision image processor; the PIL module
    holds the same function, so the class's own source is loaded with that one import
    served from there. The tokenizer is a word-level one whose special tokens carry
    ``token_ids`` (the Tekken tokenizer itself cannot be downloaded here).
    """
    import importlib.util
    import sys
    import types

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
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
    processor_class = sys.modules[name].PixtralProcessor

    vocab = {f"<filler_{i}>": i for i in range(max(token_ids.values()) + 1)}
    vocab = {v: k for k, v in vocab.items()}
    vocab.update({i: t for t, i in token_ids.items()})
    vocab[0] = "<unk>"
    words = ["hello", "world", "describe", "these"]
    vocab.update({len(vocab) + i: w for i, w in enumerate(words)})
    wordlevel = Tokenizer(models.WordLevel({t: i for i, t in vocab.items()}, unk_token="<unk>"))
    wordlevel.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=wordlevel, unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(token_ids)})
    assert tokenizer.convert_tokens_to_ids(list(token_ids)) == list(token_ids.values())

    skip = ("image_processor_type", "processor_class")
    image_processor = pil.PixtralImageProcessorPil(**{k: v for k, v in preprocessor_config.items() if k not in skip})
    kwargs = {k: v for k, v in processor_config.items() if k not in skip}
    return processor_class(image_processor=image_processor, tokenizer=tokenizer, **kwargs)


def llama4_reference(preprocessor_config: dict, processor_config: dict, token_ids: dict[str, int]):
    """The real ``Llama4Processor`` over ``Llama4ImageProcessor`` (torchvision; needs torch),
    built as ``from_pretrained`` builds it, with a word-level tokenizer whose special tokens
    carry ``token_ids`` (the Llama 4 tokenizer cannot be downloaded here). Ids of the
    words follow the largest special id."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Llama4ImageProcessor, Llama4Processor, PreTrainedTokenizerFast

    vocab = {"<unk>": 0} | dict(token_ids)
    vocab.update({w: max(token_ids.values()) + 1 + i for i, w in enumerate(WORDS)})
    wordlevel = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    wordlevel.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=wordlevel, unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(token_ids)})
    assert tokenizer.convert_tokens_to_ids(list(token_ids)) == list(token_ids.values())

    skip = ("image_processor_type", "processor_class")
    image_processor = Llama4ImageProcessor(**{k: v for k, v in preprocessor_config.items() if k not in skip})
    kwargs = {k: v for k, v in processor_config.items() if k not in skip}
    return Llama4Processor(image_processor=image_processor, tokenizer=tokenizer, **kwargs)


def run_torch_reference(image_processor, raws: list[bytes]) -> dict[str, np.ndarray]:
    """A torchvision image processor's outputs as numpy: bfloat16 becomes float32 (exact)."""
    import torch

    out = image_processor([reference_input(r) for r in raws], return_tensors="pt")
    return {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy() for k, v in out.items()}


def run_reference(processor, raws: list[bytes]) -> dict[str, np.ndarray]:
    out = processor([reference_input(r) for r in raws], return_tensors="np")
    return {k: np.asarray(v) for k, v in out.items()}



#: The Inkling tokenizer's special tokens the processors look up (the tokenizer itself
#: cannot be downloaded here): image placeholder, audio placeholder and their markers.
INKLING_TOKENS = {
    "<|unused_200054|>": 200054,
    "<|unused_200053|>": 200053,
    "<|content_image|>": 200005,
    "<|content_audio_input|>": 200020,
}


def special_word_tokenizer(token_ids: dict[str, int]):
    """A whitespace word-level tokenizer in which each special token of ``token_ids`` has
    its id and ``WORDS`` follow the largest one (for prompts like ``word_prompt``'s)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0} | dict(token_ids)
    vocab.update({w: max(token_ids.values()) + 1 + i for i, w in enumerate(WORDS)})
    wordlevel = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    wordlevel.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=wordlevel, unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(token_ids)})
    assert tokenizer.convert_tokens_to_ids(list(token_ids)) == list(token_ids.values())
    return tokenizer


def inkling_reference(preprocessor_config: dict, version: int = 1):
    """The real ``InklingProcessor`` over ``InklingImageProcessor`` (and its audio feature
    extractor, which the class requires), or with ``version=2`` ``Inkling2Processor`` over
    ``Inkling2ImageProcessor``; torchvision, so torch is needed. The tokenizer is a word
    tokenizer holding the Inkling special tokens (``INKLING_TOKENS``)."""
    import transformers

    skip = ("image_processor_type", "processor_class")
    kwargs = {k: v for k, v in preprocessor_config.items() if k not in skip}
    tokenizer = special_word_tokenizer(INKLING_TOKENS)
    if version == 2:
        return transformers.Inkling2Processor(image_processor=transformers.Inkling2ImageProcessor(**kwargs),
                                              tokenizer=tokenizer)
    from transformers.models.inkling.feature_extraction_inkling import InklingFeatureExtractor

    return transformers.InklingProcessor(feature_extractor=InklingFeatureExtractor(),
                                         image_processor=transformers.InklingImageProcessor(**kwargs),
                                         tokenizer=tokenizer)


def inkling_prompt(n_images: int, marker: bool = True) -> tuple[str, list[int]]:
    """Words around ``n_images`` image placeholders, each after its ``<|content_image|>``
    marker as the chat template renders it (``marker`` False: Inkling 2, no marker), as
    text for ``inkling_reference`` and as the unexpanded ids a gateway sends."""
    text, ids = [WORDS[0]], [special_word_ids()[WORDS[0]]]
    for i in range(n_images):
        if marker:
            text.append("<|content_image|>")
            ids.append(INKLING_TOKENS["<|content_image|>"])
        word = WORDS[(i + 1) % len(WORDS)]
        text += ["<|unused_200054|>", word]
        ids += [INKLING_TOKENS["<|unused_200054|>"], special_word_ids()[word]]
    return " ".join(text), ids


def special_word_ids() -> dict[str, int]:
    """The ids ``special_word_tokenizer(INKLING_TOKENS)`` gives ``WORDS``."""
    return {w: max(INKLING_TOKENS.values()) + 1 + i for i, w in enumerate(WORDS)}
