"""Phi-4-multimodal images (transformers' ``Phi4MultimodalImageProcessor``, torchvision only)
and audio clips (``Phi4MultimodalFeatureExtractor``: ``phi4mm_audio``).

Per image (``dynamic_preprocess``, S = size, 448): a crop grid of ceil(W/S) x ceil(H/S),
or, past ``dynamic_hd`` crops, the closest aspect ratio among the grids of at most
``dynamic_hd`` crops; resize to fit the grid (torchvision antialiased bilinear on
uint8), pad right and bottom with white, rescale+normalize (torchvision's fused form),
cut S x S crops in raster order; the global image is the normalized canvas resized to
S x S (float bicubic, not antialiased) and goes first. The attention mask is one per
crop, (S/patch)^2, zero over whole padded patches; the global one is all ones. Images
of a batch are padded to the largest crop count with zero crops whose masks are ones.

Tensors, named as the HF processor returns them and as vLLM's ``phi4_multimodal``
model reads its kwargs (``image_pixel_values``, ``image_sizes``,
``image_attention_mask``, ``num_img_tokens``; all batched per image):

* pixel_values [N, max_crops, 3, S, S] float32: HF's ``image_pixel_values``; the wire
  has one ``pixel_values`` field, which the backend maps to its kwarg (SGLang's
  phi4mm takes it as the item feature).
* ``image_sizes`` int64 [N, 2]: the padded canvas (height, width).
* ``image_attention_mask`` float32 [N, max_crops, S/patch, S/patch]: HF's name, also
  what vLLM and SGLang read (no backend reads a ``pixel_attention_mask``).
* ``num_img_tokens`` int64 [N]: the image processor returns it; the HF processor drops
  it after expanding the prompt, but vLLM's model requires it.

Each placeholder (``<|endoftext10|>``, id 200010, ``vision_config.image_token_id``)
becomes ``num_img_tokens`` copies of itself, counted as the image processor does:
256 global tokens, 1 separator, the valid tokens of the crops' 2x-subsampled masks plus
one newline per row, and 16 global newlines (constants as HF has them).

Each audio placeholder (``<|endoftext11|>``, id 200011, ``audio_config.audio_token_id``)
becomes ``audio_embed_sizes`` copies of itself. A clip's tensors: ``audio_input_features``
float32 [clips, max frames, 80] (zero past a clip's frames), ``audio_embed_sizes`` int64
[clips] and, for several clips, ``audio_attention_mask`` bool [clips, max frames], as the
extractor returns them for a batch; all batched. The extractor computes a shorter clip's
masked rows from the padding; they are zero here (nothing reads them).

Only model type ``phi4_multimodal`` is claimed: the older remote-code ``phi4mm``
processor resizes through PIL and computes different pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence
from functools import lru_cache

import numpy as np

from ..core.carriers import AudioOptions, DecodedImage
from ..core.errors import Code, PreprocessError, invalid
from ..kernels import bicubic_f32, normalize, resample_tv, window
from ..core.layout import Expansion
from . import batching, hf_keys, phi4mm_audio
from .audio import AudioFamily, AudioPlan, kept_samples
from .base import Aux, FieldLayout, ItemPlan, Normalization

MODEL_TYPES = ("phi4_multimodal",)
PROCESSOR = "Phi4MultimodalImageProcessor"
IMAGE_TOKEN_ID = 200010  # <|endoftext10|>
BICUBIC = 3


@lru_cache(maxsize=8)
def target_ratios(max_num: int, min_num: int = 1) -> tuple[tuple[int, int], ...]:
    """The candidate grids in HF's order: its set comprehension (CPython's iteration
    order of that very set decides between equal products), sorted by crop count."""
    ratios = {
        (i, j)
        for n in range(min_num, max_num + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if i * j <= max_num and i * j >= min_num
    }
    return tuple(sorted(ratios, key=lambda x: x[0] * x[1]))


def closest_aspect_ratio(width: int, height: int, ratios, image_size: int) -> tuple[int, int]:
    """``find_closest_aspect_ratio``: on a tie, the later grid wins if the image area is
    over half of that grid's."""
    aspect = width / height
    best_diff, best = float("inf"), (1, 1)
    area = width * height
    for ratio in ratios:
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff and area > 0.5 * image_size * image_size * ratio[0] * ratio[1]:
            best = ratio
    return best


@dataclass(frozen=True)
class Geometry:
    """One image's ``dynamic_preprocess`` outcome."""

    cols: int
    rows: int
    new_h: int
    new_w: int
    pad_h: int
    pad_w: int


def dynamic_geometry(height: int, width: int, size: int, max_num: int) -> Geometry:
    """Grid, resized size and padding, with HF's float arithmetic."""
    w_crops = math.ceil(width / float(size))
    h_crops = math.ceil(height / float(size))
    if w_crops * h_crops > max_num:
        cols, rows = closest_aspect_ratio(width, height, target_ratios(max_num), size)
    else:
        cols, rows = w_crops, h_crops
    tw, th = size * cols, size * rows
    ratio_w, ratio_h = tw / width, th / height
    if ratio_w < ratio_h:
        new_w, new_h = tw, int(height * ratio_w)
        pad_w, pad_h = 0, th - new_h
    else:
        new_w, new_h = int(width * ratio_h), th
        pad_w, pad_h = tw - new_w, 0
    return Geometry(cols, rows, new_h, new_w, pad_h, pad_w)


@dataclass(frozen=True, eq=False)
class Crops:
    """A plan's geometry: the grid and the masks of the global image (ones) and each crop."""

    grid: Geometry
    masks: np.ndarray  # float32 [1 + rows*cols, S/patch, S/patch]


def attention_mask(g: Geometry, mask_size: int, patch: int) -> np.ndarray:
    """float32 [rows*cols, m, m]: the crops' masks in raster order, zero over the last
    whole patches of padding."""
    m = np.ones((mask_size * g.rows, mask_size * g.cols), dtype=np.float32)
    if g.pad_w >= patch:
        m[:, -math.floor(g.pad_w / patch):] = 0
    if g.pad_h >= patch:
        m[-math.floor(g.pad_h / patch):, :] = 0
    return m.reshape(g.rows, mask_size, g.cols, mask_size).transpose(0, 2, 1, 3).reshape(-1, mask_size, mask_size)


def num_img_tokens(crop_masks: np.ndarray, g: Geometry) -> int:
    """HF's count: each crop mask subsampled [0::2, 0::2], tiled into one grid ``D``;
    256 + 1 + sum(D) + sum(D[:, 0]) + 16."""
    sub = crop_masks[:, 0::2, 0::2]
    k = sub.shape[1]
    d = sub.reshape(g.rows, g.cols, k, k).transpose(0, 2, 1, 3).reshape(g.rows * k, g.cols * k)
    return 256 + 1 + int(d.sum()) + int(d[:, 0].sum()) + 16


@dataclass(frozen=True)
class Phi4Config(Normalization):
    """The resolved knobs (HF class defaults fill what the files leave out)."""

    size: int = 448
    patch_size: int = 14
    dynamic_hd: int = 36
    image_mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    image_std: tuple[float, ...] = (0.5, 0.5, 0.5)
    image_token_id: int = IMAGE_TOKEN_ID
    #: vLLM's forward kwarg for the pixel tensor, by the checkpoint's architecture.
    vllm_pixel_kwarg: str = "input_image_embeds"
    audio_token_id: int = phi4mm_audio.AUDIO_TOKEN_ID
    audio: phi4mm_audio.Phi4AudioConfig = phi4mm_audio.Phi4AudioConfig()

    @property
    def mask_size(self) -> int:
        return self.size // self.patch_size


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> Phi4Config:
    d = Phi4Config()
    g = hf_keys.get
    hf_keys.refuse_false(preprocessor, "Phi-4-multimodal", "do_convert_rgb")
    size = hf_keys.size_dict(g(preprocessor, "size", default={"height": d.size, "width": d.size}), "size",
                             default_to_square=True)
    if set(size) != {"height", "width"} or size["height"] != size["width"]:
        raise hf_keys.ConfigError(f"Phi-4-multimodal needs a square size (height = width), got {size}")
    if hf_keys.resample(preprocessor, BICUBIC) != BICUBIC:
        raise hf_keys.ConfigError("Phi-4-multimodal's global image is only reproduced with resample 3 (bicubic)")
    vision = config.get("vision_config") or {}
    token = g(vision, "image_token_id", default=g(config, "image_token_id", "image_token_index", default=IMAGE_TOKEN_ID))
    audio_token = g(config.get("audio_config") or {}, "audio_token_id",
                    default=g(config, "audio_token_id", default=phi4mm_audio.AUDIO_TOKEN_ID))
    return Phi4Config(
        audio_token_id=hf_keys.as_int(audio_token, "audio_token_id"),
        audio=phi4mm_audio.config_from_hf(preprocessor),
        size=size["height"],
        patch_size=hf_keys.as_int(g(preprocessor, "patch_size", default=d.patch_size), "patch_size"),
        dynamic_hd=hf_keys.as_int(g(preprocessor, "dynamic_hd", default=d.dynamic_hd), "dynamic_hd"),
        **hf_keys.normalization(preprocessor, d.image_mean, d.image_std, d.rescale_factor),
        image_token_id=hf_keys.as_int(token, "image_token_id"),
        vllm_pixel_kwarg="image_pixel_values" if "Phi4MultimodalForCausalLM" in (config.get("architectures") or ())
        else d.vllm_pixel_kwarg,
    )


def matches(preprocessor: dict, config: dict) -> bool:
    """model_type "phi4_multimodal" (with its image processor, or none named); or, with
    no model_type, ``Phi4MultimodalImageProcessor`` by name."""
    return hf_keys.claims(preprocessor, config, MODEL_TYPES, PROCESSOR)


class Phi4Multimodal(AudioFamily[Phi4Config, Crops, "int | None"]):
    name = "phi4_multimodal"
    reference_processor = "Phi4MultimodalImageProcessor (torchvision) + Phi4MultimodalFeatureExtractor"
    #: transformers has only the torchvision class for Phi-4-multimodal.
    processors = ("torchvision",)
    audio_features_key = "audio_input_features"

    def __init__(self, config: Phi4Config):
        if config.audio_token_id == config.image_token_id:
            raise hf_keys.ConfigError("the audio token must differ from the image token")
        self.config = config
        self.image_token_id = config.image_token_id
        self.audio_token_id = config.audio_token_id
        keys = ("audio_input_features", "audio_embed_sizes", "audio_attention_mask")
        self.audio_field_layout = FieldLayout(batched=keys, encoder_input_key=keys[0])
        # vLLM phi4mm.py (Phi4MMForCausalLM, the architecture of the published checkpoint):
        # input_image_embeds, image_attention_mask, image_sizes, num_img_tokens batched,
        # nothing kept on the CPU; the pixel tensor is its kwarg input_image_embeds. A
        # checkpoint in the transformers format (Phi4MultimodalForCausalLM, vLLM
        # phi4_multimodal.py) reads image_pixel_values.
        self.field_layout = FieldLayout(
            batched=("pixel_values", "image_sizes", "image_attention_mask", "num_img_tokens"),
            encoder_input_key=config.vllm_pixel_kwarg)
        self._lut = config.lut(normalize.torchvision_backend_lut)

    def batch_shape(self, plans: Sequence[ItemPlan[Crops]]) -> tuple[tuple[int, ...], batching.Slots]:
        return batching.stacked_padded_rows(plans)

    def plan(self, height: int, width: int, item: int) -> ItemPlan[Crops]:
        c = self.config
        g = dynamic_geometry(height, width, c.size, c.dynamic_hd)
        th, tw = c.size * g.rows, c.size * g.cols
        if min(g.new_h, th) < 10 or min(g.new_w, tw) < 10:
            raise invalid(f"{height}x{width} image: the aspect ratio is too extreme "
                          f"(resized to {g.new_h}x{g.new_w}, under 10 pixels)", item=item)
        crop_masks = attention_mask(g, c.mask_size, c.patch_size)
        tokens = num_img_tokens(crop_masks, g)
        masks = np.concatenate([np.ones((1, c.mask_size, c.mask_size), np.float32), crop_masks])
        return ItemPlan((g.new_h, g.new_w), (1 + g.rows * g.cols, 3, c.size, c.size), Crops(g, masks),
                        Expansion.repeat(self.image_token_id, tokens))

    def grid(self, plan: ItemPlan[Crops]) -> tuple[int, ...]:
        """The crops: rows x columns (the global image comes on top of them)."""
        return plan.geometry.grid.rows, plan.geometry.grid.cols

    def process_item(self, image: DecodedImage, plan: ItemPlan[Crops], out: np.ndarray) -> Aux:
        c = self.config
        g = plan.geometry.grid
        rgb = image.rgb
        if rgb.shape[:2] != (g.new_h, g.new_w):  # tvF.resize returns an image of the same size as is
            rgb = resample_tv.resize_aa_u8(rgb, g.new_h, g.new_w, "bilinear")
        window.tiles_chw(rgb, 0, 0, g.rows, g.cols, self._lut, out[1:], fill=255)
        th, tw = c.size * g.rows, c.size * g.cols
        if (th, tw) == (c.size, c.size):
            out[0] = out[1]  # the global resize is the identity
        else:
            bicubic_f32.resize_canvas_bicubic(rgb, 0, 0, th, tw, self._lut, out[0], fill=255)
        return {
            "image_sizes": np.array([[th, tw]], dtype=np.int64),
            "image_attention_mask": plan.geometry.masks[None],
            "num_img_tokens": np.array([plan.token_count], dtype=np.int64),
        }

    def batch_tensors(self, aux: list[Aux]) -> dict[str, np.ndarray]:
        """As the base, but the masks of images with fewer crops are padded with ones."""
        if not aux:
            return {}
        most = max(a["image_attention_mask"].shape[1] for a in aux)
        m = self.config.mask_size
        masks = np.ones((len(aux), most, m, m), dtype=np.float32)
        for i, a in enumerate(aux):
            own = a["image_attention_mask"][0]
            masks[i, : own.shape[0]] = own
        return {
            "image_sizes": np.concatenate([a["image_sizes"] for a in aux]),
            "image_attention_mask": masks,
            "num_img_tokens": np.concatenate([a["num_img_tokens"] for a in aux]),
        }

    def token_ids(self) -> dict[str, int]:
        return {"image": self.image_token_id, "audio": self.audio_token_id}

    # -- audio -----------------------------------------------------------------------------

    def audio_config(self, options: AudioOptions | None = None) -> int | None:
        """The samples a request's ``max_seconds`` keeps (None: the whole clip)."""
        return kept_samples(options, self.config.audio.sampling_rate)

    def sampling_rate(self, config: int | None) -> int:
        return self.config.audio.sampling_rate

    def plan_audio(self, config: int | None, samples: int, item: int) -> AudioPlan:
        cfg = self.config.audio
        kept = int(samples) if config is None else min(int(samples), config)
        frames = phi4mm_audio.frame_count(kept, cfg)
        if frames == 0:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"{kept} samples make no feature frame (the extractor "
                                  f"needs {cfg.win_length})", item=item, kind="audio")
        tokens = phi4mm_audio.embed_size(frames, cfg)
        return AudioPlan(kept, frames, Expansion.repeat(self.audio_token_id, tokens))

    def process_audio(self, config: int | None, wave: np.ndarray, plan: AudioPlan) -> dict[str, np.ndarray]:
        return {"audio_input_features": phi4mm_audio.features(wave[:plan.samples], self.config.audio)[None],
                "audio_embed_sizes": np.array([plan.token_count], np.int64)}

    def audio_batch(self, clips: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        frames = [c["audio_input_features"].shape[1] for c in clips]
        feats = np.zeros((len(clips), max(frames), self.config.audio.feature_size), np.float32)
        for i, c in enumerate(clips):
            feats[i, :frames[i]] = c["audio_input_features"][0]
        out = {"audio_input_features": feats,
               "audio_embed_sizes": np.concatenate([c["audio_embed_sizes"] for c in clips])}
        if len(clips) > 1:
            out["audio_attention_mask"] = np.arange(max(frames))[None, :] < np.array(frames)[:, None]
        return out

    def warmup(self) -> None:
        phi4mm_audio.features(np.zeros(1000, np.float32), self.config.audio)
        resample_tv.warmup()
        window.warmup()
        bicubic_f32.warmup()
        s = self.config.size
        # one crop (its global is a copy), padded grids of either orientation, batched slots
        self.run_batches([(37, 53)], [(s, s), (300, 2 * s + 5), (4 * s, 11)])
