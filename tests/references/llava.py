"""LLaVA-1.5: the real ``LlavaProcessor`` over ``CLIPImageProcessorPil`` or
``LlavaImageProcessorPil``, with a word-level tokenizer in which ``<image>`` has the
config's id (the checkpoint's tokenizer cannot be downloaded), and the prompts for it.
LLaVA-NeXT (``references.llava_next``) uses the same tokenizer and prompts."""

from __future__ import annotations

from references.common import WORDS, init_kwargs

#: ``<image>`` in the LLaVA checkpoints.
IMAGE = 32000


def reference(preprocessor_config: dict, processor_config: dict, image_token_id: int = IMAGE):
    """The real ``LlavaProcessor`` as ``from_pretrained`` builds it: the PIL image
    processor the config names (CLIP's by default), the processor_config.json values as
    init kwargs, and ``word_tokenizer(image_token_id)``. ``.image_processor`` is the pixel
    reference; calling it with text gives the ids."""
    import transformers

    kind = str(preprocessor_config.get("image_processor_type") or "CLIPImageProcessor")
    assert not kind.startswith("LlavaNext"), "LLaVA-NeXT: references.llava_next"
    name = next(n for n in ("Llava", "CLIP") if kind.startswith(n))
    image_processor_class = getattr(transformers, f"{name}ImageProcessorPil")
    return build(transformers.LlavaProcessor, image_processor_class, preprocessor_config, processor_config,
                 image_token_id)


def processor(src):
    return reference(src.preprocessor_config, src.processor_config)


def build(processor_class, image_processor_class, preprocessor_config: dict, processor_config: dict,
          image_token_id: int):
    """``processor_class`` over ``image_processor_class``, both from the config files'
    values, with ``word_tokenizer(image_token_id)``."""
    image_processor = image_processor_class(**init_kwargs(preprocessor_config))
    kwargs = {k: v for k, v in processor_config.items() if k != "processor_class"}
    return processor_class(image_processor=image_processor, tokenizer=word_tokenizer(image_token_id), **kwargs)


def word_prompt(n_images: int, image_token_id: int) -> tuple[str, list[int]]:
    """A prompt of words and ``n_images`` ``<image>`` placeholders, as text for the
    processor and as the unexpanded ids a gateway would send."""
    words = [WORDS[i % len(WORDS)] for i in range(n_images + 1)]
    text = [words[0]] + [t for w in words[1:] for t in ("<image>", w)]
    vocab = {w: image_token_id + 1 + i for i, w in enumerate(WORDS)} | {"<image>": image_token_id}
    return " ".join(text), [vocab[t] for t in text]


def word_tokenizer(image_token_id: int):
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
