"""What LLaVA-1.5 and LLaVA-NeXT read alike: CLIP-style image-processor knobs and the
HF processor's token-count kwargs.

Both image processors are CLIP's (shortest-edge resize, center crop, rescale,
normalize) with extras; both processors count ``<image>`` tokens from ``patch_size``,
``num_additional_image_tokens`` and ``vision_feature_select_strategy``, which live in
the checkpoint's processor_config.json rather than in the image processor's config.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...kernels import resample_pil
from .. import hf_keys
from ..base import Normalization


@dataclass(frozen=True)
class ClipKnobs(Normalization):
    """The image processor's resolved values (HF class defaults fill the gaps)."""

    size: tuple[tuple[str, int], ...] = (("shortest_edge", 224),)
    crop_size: tuple[int, int] = (224, 224)
    do_resize: bool = True
    do_center_crop: bool = True
    resample: int = resample_pil.BICUBIC

    @property
    def size_dict(self) -> dict[str, int]:
        return dict(self.size)

    def resize_to(self, height: int, width: int) -> tuple[int, int]:
        """``PilBackend.resize``'s output size for a ``height`` x ``width`` input."""
        s = self.size_dict
        if "shortest_edge" in s:  # get_resize_output_image_size(default_to_square=False)
            short, long = (width, height) if width <= height else (height, width)
            new_short, new_long = s["shortest_edge"], int(s["shortest_edge"] * long / short)
            return (new_long, new_short) if width <= height else (new_short, new_long)
        return s["height"], s["width"]


def clip_knobs(preprocessor: dict, family: str) -> ClipKnobs:
    """Read and check the CLIP knobs; refuse what the family cannot reproduce exactly."""
    d = ClipKnobs()
    g = hf_keys.get
    hf_keys.refuse_false(preprocessor, family, "do_convert_rgb")
    size = hf_keys.size_dict(g(preprocessor, "size", default=d.size_dict), "size", default_to_square=False)
    if set(size) not in ({"shortest_edge"}, {"height", "width"}):
        raise hf_keys.ConfigError(
            f"size {size} is not supported for the {family} family (shortest_edge, or height and width)")
    crop = hf_keys.size_dict(g(preprocessor, "crop_size", default=dict(zip(("height", "width"), d.crop_size))),
                             "crop_size", default_to_square=True)
    if set(crop) != {"height", "width"}:
        raise hf_keys.ConfigError(f"crop_size must have height and width, got {crop}")
    return ClipKnobs(
        size=tuple(sorted(size.items())),
        crop_size=(crop["height"], crop["width"]),
        do_resize=hf_keys.flag(preprocessor, "do_resize", True),
        do_center_crop=hf_keys.flag(preprocessor, "do_center_crop", True),
        resample=hf_keys.resample(preprocessor, d.resample),
        **hf_keys.normalization(preprocessor, d.image_mean, d.image_std, d.rescale_factor),
    )


@dataclass(frozen=True)
class TokenKnobs:
    """The processor kwargs its ``<image>`` count depends on."""

    patch_size: int = 14
    num_additional_image_tokens: int = 1
    vision_feature_select_strategy: str | None = "default"

    @property
    def dropped(self) -> int:
        """The "default" strategy drops the CLS feature (the processor subtracts 1)."""
        return 1 if self.vision_feature_select_strategy == "default" else 0


def token_knobs(config: dict, processor: dict) -> TokenKnobs:
    """From processor_config.json as the HF processor reads it, when it configures the
    count (has ``patch_size``): its class defaults fill the rest (no extra tokens, no
    strategy). Without ``patch_size`` the HF processor cannot count at all; the values
    then come from config.json as the model uses them: the vision tower's patch size,
    the model's strategy, and one CLS token for a CLIP tower."""
    if processor.get("patch_size") is not None:
        patch = processor["patch_size"]
        strategy = processor.get("vision_feature_select_strategy")
        extra = processor.get("num_additional_image_tokens", 0)
    else:
        vision = config.get("vision_config") or {}
        patch = vision.get("patch_size", 14)
        strategy = config.get("vision_feature_select_strategy", "default")
        extra = 1 if vision.get("model_type", "clip_vision_model") == "clip_vision_model" else 0
    if isinstance(extra, bool) or not isinstance(extra, int) or extra < 0:
        raise hf_keys.ConfigError(f"num_additional_image_tokens must be a non-negative integer, got {extra!r}")
    if strategy is not None and not isinstance(strategy, str):
        raise hf_keys.ConfigError(f"vision_feature_select_strategy must be a string, got {strategy!r}")
    return TokenKnobs(hf_keys.as_int(patch, "patch_size"), extra, strategy)
