"""The family registry: which family serves a checkpoint, decided from its two JSON files.

Adding a family = one module here + one entry in ``FAMILIES``.
"""

from __future__ import annotations

from . import llama4, llava, llava_next, phi3v, phi4mm, pixtral, qwen_vl
from .base import Family, FieldLayout, ItemPlan
from .hf_keys import ConfigError

# (family name, matches(preprocessor, config), build(preprocessor, config, processor) -> Family),
# first match wins. ``processor`` is processor_config.json ({} when absent).
FAMILIES = [
    # Before any LLaVA entry: Pixtral-12B is model_type "llava" with a pixtral tower.
    ("pixtral", pixtral.matches, lambda pp, cfg, proc: pixtral.Pixtral(pixtral.config_from_hf(pp, cfg, proc))),
    ("qwen_vl", qwen_vl.matches, lambda pp, cfg, proc: qwen_vl.QwenVL(qwen_vl.config_from_hf(pp, cfg))),
    ("llava_next", llava_next.matches,
     lambda pp, cfg, proc: llava_next.LlavaNext(llava_next.config_from_hf(pp, cfg, proc))),
    ("llava", llava.matches, lambda pp, cfg, proc: llava.Llava(llava.config_from_hf(pp, cfg, proc))),
    ("phi4_multimodal", phi4mm.matches,
     lambda pp, cfg, proc: phi4mm.Phi4Multimodal(phi4mm.config_from_hf(pp, cfg, proc))),
    ("phi3_v", phi3v.matches, lambda pp, cfg, proc: phi3v.Phi3V(phi3v.config_from_hf(pp, cfg, proc))),
    ("llama4", llama4.matches, lambda pp, cfg, proc: llama4.Llama4(llama4.config_from_hf(pp, cfg, proc))),
]


def build_family(preprocessor: dict, config: dict, processor: dict | None = None) -> Family:
    for _name, matches, build in FAMILIES:
        if matches(preprocessor, config):
            return build(preprocessor, config, processor or {})
    raise ConfigError(
        f"no supported family for model_type={config.get('model_type')!r}, "
        f"image_processor_type={preprocessor.get('image_processor_type')!r}"
    )


__all__ = ["ConfigError", "FAMILIES", "Family", "FieldLayout", "ItemPlan", "build_family"]
