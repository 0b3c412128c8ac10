"""References for the Phi families (need torch; the tests skip without it).

* Phi-4-multimodal: the real ``Phi4MultimodalProcessor`` (``Phi4MultimodalImageProcessor``,
  its audio feature extractor, and a word-level tokenizer whose ``image_token`` is
  ``<|endoftext10|>``; the checkpoint's tokenizer cannot be downloaded here).
* Phi-3-vision: no installable reference exists (remote code), so ``phi3v_reference``
  is an independent, deliberately plain transcription of the published
  ``Phi3VImageProcessor.preprocess`` and ``Phi3VProcessor`` token layout: PIL for the
  transpose / resize / pad, torchvision's ``ToTensor`` + ``Normalize`` and torch's
  ``F.interpolate``, as the remote code runs them. It shares no code with the family.
"""

from __future__ import annotations

import re

import numpy as np
from PIL import Image

from reference import reference_input

PHI4_IMAGE, PHI4_AUDIO = 200010, 200011
WORDS = ("hello", "world", "describe", "these")


def phi4_processor(preprocessor_config: dict, image_token_id: int = PHI4_IMAGE):
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
    skip = ("image_processor_type", "processor_class")
    image_processor = Phi4MultimodalImageProcessor(**{k: v for k, v in preprocessor_config.items() if k not in skip})
    return Phi4MultimodalProcessor(image_processor=image_processor, audio_processor=Phi4MultimodalFeatureExtractor(),
                                   tokenizer=tokenizer)


def phi4_prompt(n_images: int, image_token_id: int = PHI4_IMAGE) -> tuple[str, list[int]]:
    """Words and ``n_images`` ``<|endoftext10|>``: as text, and as the unexpanded ids."""
    words = [WORDS[i % len(WORDS)] for i in range(n_images + 1)]
    text = [words[0]] + [t for w in words[1:] for t in ("<|endoftext10|>", w)]
    vocab = {w: image_token_id + 2 + i for i, w in enumerate(WORDS)} | {"<|endoftext10|>": image_token_id}
    return " ".join(text), [vocab[t] for t in text]


# -- Phi-3-vision, from the published remote code -----------------------------------------


def _hd_transform(img: Image.Image, hd_num: int) -> Image.Image:
    import torchvision

    width, height = img.size
    trans = False
    if width < height:
        img = img.transpose(Image.TRANSPOSE)
        trans = True
        width, height = img.size
    ratio = width / height
    scale = 1
    while scale * np.ceil(scale / ratio) <= hd_num:
        scale += 1
    scale -= 1
    new_w = int(scale * 336)
    new_h = int(new_w / ratio)
    img = torchvision.transforms.functional.resize(img, [new_h, new_w])
    tar = int(np.ceil(new_h / 336) * 336)
    top = int((tar - new_h) / 2)
    img = torchvision.transforms.functional.pad(img, [0, top, 0, tar - new_h - top], fill=[255, 255, 255])
    if trans:
        img = img.transpose(Image.TRANSPOSE)
    return img


def phi3v_reference(raws: list[bytes], num_crops: int, mean, std) -> dict[str, np.ndarray]:
    """pixel_values [B, num_crops+1, 3, 336, 336], image_sizes [B, 2], num_img_tokens [B]."""
    import torch
    import torchvision

    images = [_convert_to_rgb(reference_input(r)) for r in raws]
    to_tensor = torchvision.transforms.Compose(
        [torchvision.transforms.ToTensor(), torchvision.transforms.Normalize(mean, std)])
    hd = [to_tensor(_hd_transform(im.convert("RGB"), num_crops)) for im in images]
    shapes = [[int(t.size(1)), int(t.size(2))] for t in hd]
    tokens = [int(((h // 336) * (w // 336) + 1) * 144 + 1 + (h // 336 + 1) * 12) for h, w in shapes]
    out = []
    for t, (h, w) in zip(hd, shapes):
        glob = torch.nn.functional.interpolate(t.unsqueeze(0).float(), size=(336, 336), mode="bicubic").to(t.dtype)
        crops = t.reshape(1, 3, h // 336, 336, w // 336, 336).permute(0, 2, 4, 1, 3, 5).reshape(-1, 3, 336, 336)
        both = torch.cat([glob, crops], dim=0)
        if both.shape[0] < num_crops + 1:
            pad = torch.zeros(num_crops + 1 - both.shape[0], 3, 336, 336, dtype=both.dtype)
            both = torch.cat([both, pad], dim=0)
        out.append(both)
    return {
        "pixel_values": torch.stack(out).numpy(),
        "image_sizes": np.array(shapes, dtype=np.int64),
        "num_img_tokens": np.array(tokens, dtype=np.int64),
    }


def _convert_to_rgb(im: Image.Image) -> Image.Image:
    """transformers' ``convert_to_rgb`` (the remote processor calls it before its own
    ``.convert('RGB')``): alpha composited onto white."""
    from transformers.image_transforms import convert_to_rgb

    return Image.fromarray(convert_to_rgb(im, return_numpy=True))


def phi3v_expected_ids(n_images: int, num_img_tokens: list[int], image_token_id: int) -> tuple[list[int], list[int]]:
    """(unexpanded ids with one ``image_token_id`` per image, expanded ids): the published
    ``Phi3VProcessor`` layout (``<|image_k|>`` -> [-k] * num_img_tokens[k-1] between the
    text chunks) with the negative ids replaced by ``image_token_id`` as vLLM does."""
    text = " ".join(f"{WORDS[i % len(WORDS)]} <|image_{i + 1}|>" for i in range(n_images)) + " end"
    pattern = r"<\|image_\d+\|>"
    vocab = {w: 1000 + i for i, w in enumerate(WORDS + ("end",))}
    chunks = [[vocab[w] for w in c.split()] for c in re.split(pattern, text)]
    tags = [int(s.split("|")[1].split("_")[-1]) for s in re.findall(pattern, text)]
    pads = [[-k] * num_img_tokens[k - 1] for k in tags] + [[]]
    expanded = [t for chunk, pad in zip(chunks, pads) for t in chunk + pad]
    expanded = [image_token_id if t < 0 else t for t in expanded]
    source = [t for chunk, pad in zip(chunks, pads) for t in chunk + ([image_token_id] if pad else [])]
    return source, expanded


def phi3v_count_from_size(width: int, height: int, num_crops: int) -> int:
    """The published ``calc_num_image_tokens_from_image_size`` (``calc_hd_transform_size``)."""
    transposed = width < height
    if transposed:
        width, height = height, width
    ratio = width / height
    scale = 1
    while scale * np.ceil(scale / ratio) <= num_crops:
        scale += 1
    scale -= 1
    new_width = int(scale * 336)
    new_height = int(new_width / ratio)
    target = int(np.ceil(new_height / 336) * 336)
    top = int((target - new_height) / 2)
    padded_w, padded_h = new_width, new_height + top + (target - new_height - top)
    if transposed:
        padded_w, padded_h = padded_h, padded_w
    return int((padded_h // 336 * padded_w // 336 + 1) * 144 + 1 + (padded_h // 336 + 1) * 12)

