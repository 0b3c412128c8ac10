"""The family registry: which family serves a checkpoint, decided from its JSON files.

Adding a family = one module here + one entry in ``FAMILIES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Generic

from ..core.carriers import FieldLayout
from .inkling import inkling, inkling2
from . import llama4, phi3v, phi4mm, pixtral
from .llava import llava, next as llava_next
from .qwen import asr as qwen3_asr, audio2 as qwen2_audio, image as qwen_vl, omni as qwen3_omni
from .base import C, PROCESSORS, Family, ImageOptions, ItemPlan
from .hf_keys import ConfigError
from .video import VideoFamily


@dataclass(frozen=True)
class Entry(Generic[C]):
    #: (preprocessor_config.json, config.json) -> whether this family serves the checkpoint
    matches: Callable[[dict, dict], bool]
    #: (preprocessor_config.json, config.json, processor_config.json) -> the resolved config
    config_from_hf: Callable[[dict, dict, dict], C]
    family: type[Family[C, Any]]


# First match wins.
FAMILIES: tuple[Entry[Any], ...] = (
    # Before any LLaVA entry: Pixtral-12B is model_type "llava" with a pixtral tower.
    Entry(pixtral.matches, pixtral.config_from_hf, pixtral.Pixtral),
    # Before Qwen-VL, which claims every Qwen2VLImageProcessor checkpoint.
    Entry(qwen3_omni.matches, qwen3_omni.config_from_hf, qwen3_omni.Qwen3Omni),
    Entry(partial(qwen3_omni.matches, generation=qwen3_omni.QWEN2_5),
          partial(qwen3_omni.config_from_hf, generation=qwen3_omni.QWEN2_5), qwen3_omni.Qwen2_5Omni),
    Entry(qwen_vl.matches, qwen_vl.config_from_hf, qwen_vl.QwenVL),
    Entry(llava_next.matches, llava_next.config_from_hf, llava_next.LlavaNext),
    Entry(llava.matches, llava.config_from_hf, llava.Llava),
    Entry(phi4mm.matches, phi4mm.config_from_hf, phi4mm.Phi4Multimodal),
    Entry(phi3v.matches, phi3v.config_from_hf, phi3v.Phi3V),
    Entry(llama4.matches, llama4.config_from_hf, llama4.Llama4),
    Entry(inkling.matches, inkling.config_from_hf, inkling.Inkling),
    Entry(inkling2.matches, inkling2.config_from_hf, inkling2.Inkling2),
    Entry(qwen3_asr.matches, qwen3_asr.config_from_hf, qwen3_asr.Qwen3ASR),
    Entry(qwen2_audio.matches, qwen2_audio.config_from_hf, qwen2_audio.Qwen2Audio),
)


def build_family(preprocessor: dict, config: dict, processor: dict | None = None) -> Family[Any, Any]:
    """The family serving a checkpoint, from its preprocessor_config.json, config.json and
    processor_config.json ({} or None when absent)."""
    for entry in FAMILIES:
        if entry.matches(preprocessor, config):
            return entry.family(entry.config_from_hf(preprocessor, config, processor or {}))
    raise ConfigError(
        f"no supported family for model_type={config.get('model_type')!r}, "
        f"image_processor_type={preprocessor.get('image_processor_type')!r}"
    )


__all__ = ["ConfigError", "FAMILIES", "PROCESSORS", "Family", "FieldLayout", "ImageOptions", "ItemPlan", "VideoFamily",
           "build_family"]
