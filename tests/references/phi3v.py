"""Phi-3-vision / Phi-3.5-vision. No installable reference exists (remote code), so
``reference`` is an independent, deliberately plain transcription of the published
``Phi3VImageProcessor.preprocess`` and ``Phi3VProcessor`` token layout: PIL for the
transpose / resize / pad, torchvision's ``ToTensor`` + ``Normalize`` and torch's
``F.interpolate``, as the remote code runs them (needs torch). It shares no code with the
family (the ``phi3v`` fixture set asks the family only which sizes it refuses).
"""

from __future__ import annotations

import re

import numpy as np
from PIL import Image

from references.common import WORDS, build_input, case, load_torch, reference_input


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


def reference(raws: list[bytes], num_crops: int, mean, std) -> dict[str, np.ndarray]:
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


def expected_ids(n_images: int, num_img_tokens: list[int], image_token_id: int) -> tuple[list[int], list[int]]:
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


def count_from_size(width: int, height: int, num_crops: int) -> int:
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


# -- the phi3v fixture set ------------------------------------------------------------------

PRESETS = {"microsoft/Phi-3-vision-128k-instruct": 16, "microsoft/Phi-3.5-vision-instruct": 4}
SIZES = [(1, 1), (13, 7), (7, 13), (1, 2000), (3000, 20), (300, 500), (500, 300), (336, 336), (337, 336),
         (1000, 40), (40, 1000), (999, 777), (1008, 1680), (1344, 1344), (2000, 3000)]


def fixture_outputs(raws: list[bytes], num_crops: int, mean, std) -> dict[str, np.ndarray]:
    """tests/references/phi3v.reference (the published remote code, transcribed) and
    the expanded ids of its layout (<|image_k|> -> 32044 x num_img_tokens)."""
    load_torch()
    out = reference(raws, num_crops, mean, std)
    _, ids = expected_ids(len(raws), out["num_img_tokens"].tolist(), 32044)
    out["input_ids"] = np.asarray(ids, dtype=np.int64)
    return out


def phi3v_set():
    """Phi-3-vision / Phi-3.5-vision from tests/references/phi3v.reference, an
    independent transcription of Microsoft's published Phi3VImageProcessor (PIL
    transpose/resize/pad, torchvision ToTensor + Normalize, torch F.interpolate bicubic),
    for both presets (num_crops 16 and 4): tiny, thin (refused sizes excluded), odd,
    exact-fit and large sizes, Pillow modes, one three-image request; a model directory
    with num_crops 9 and other statistics. Outputs: pixel_values, image_sizes,
    num_img_tokens, input_ids (prompt: tests/references/phi3v.expected_ids)."""
    from sglang_mm_grpc.config import resolve
    from sglang_mm_grpc.families import phi3v

    for preset, n in PRESETS.items():
        pre = resolve(preset).preprocessor_config
        tag = preset.split("/")[1]
        mean, std = pre["image_mean"], pre["image_std"]
        for h, w in SIZES:
            if phi3v.hd_geometry(h, w, n).resized_h == 0:
                continue
            kind = "noise" if h * w < 400_000 else "smooth"
            recipe = {"make": "png" if h * w < 1_000_000 else "jpeg", "h": h, "w": w, "seed": 2 * h + w, "kind": kind}
            yield case(f"{tag}-{h}x{w}-{kind}", recipe, fixture_outputs([build_input(recipe)], n, mean, std),
                       {"model": preset})
        for name in ("png_rgba", "jpeg_cmyk", "jpeg_exif_orientation_8", "png_1"):
            recipe = {"make": "mode", "name": name}
            yield case(f"{tag}-mode-{name}", recipe, fixture_outputs([build_input(recipe)], n, mean, std),
                       {"model": preset})
        items = [{"make": "png", "h": 336, "w": 672, "seed": 1, "kind": "noise"},
                 {"make": "jpeg", "h": 640, "w": 480, "seed": 2, "kind": "smooth"},
                 {"make": "png", "h": 30, "w": 3000, "seed": 3, "kind": "noise"}]
        recipe = {"make": "list", "items": items}
        yield case(f"{tag}-three-images", recipe, fixture_outputs(build_input(recipe), n, mean, std),
                   {"model": preset})
    d = {"image_processor_type": "Phi3VImageProcessor", "num_crops": 9, "image_mean": [0.5, 0.5, 0.5],
         "image_std": [0.25, 0.5, 0.125]}
    for h, w in ((300, 500), (37, 600), (1080, 1920)):
        recipe = {"make": "jpeg", "h": h, "w": w, "seed": h + w, "kind": "smooth"}
        yield case(f"dir-crops9-{h}x{w}", recipe,
                   fixture_outputs([build_input(recipe)], 9, d["image_mean"], d["image_std"]),
                   {"preprocessor_config": d})


FIXTURE_SETS = {"phi3v": phi3v_set}
