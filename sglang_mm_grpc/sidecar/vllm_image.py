"""An image as a vLLM 0.33 engine takes it: the families the sidecar serves, the processing
vLLM runs for each, the items' fields and each item's placeholder range.

Served: the Qwen-VL families, the Omni thinkers (Qwen2.5-Omni, Qwen3-Omni: Qwen-VL's
images, normalized, since their model classes do not normalize on the device) and Llama 4
(vLLM runs the HF processor the service reproduces, torchvision classes, through
``call_hf_processor``, which casts its floating tensors to the engine's dtype) and
Inkling, whose vLLM processor (vllm/models/inkling/common/mm_preprocess.py
``InklingMultiModalProcessor``) departs from the HF one in three ways the sidecar follows:
it resizes each image with Pillow (LANCZOS) by ``rescale_image_frac``, 2.0 where the
checkpoint sets none (``_rescale_image``, ``DEFAULT_RESCALE_IMAGE_FRAC``), before the HF
image processor, called with no rescale; it casts ``pixel_values`` to bfloat16; and its
prompt carries only the ``<|content_image|>`` marker per image
(vllm/renderers/inkling_encoding.py), which ``_get_prompt_updates`` keeps, putting the
image's ``<|unused_200054|>`` tokens after it (``select_token_id``: only those are
embeddings). ``REFUSED`` says, with the vLLM source that decides it, why each other family
is not served.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable

from ..core.carriers import PreprocessOutput
from ..core.errors import invalid
from ..families import Family
from ..families.inkling.inkling import Inkling
from . import vllm_items

#: The Qwen-VL families' image fields (vllm/model_executor/models/qwen2_vl.py
#: ``_create_qwen2vl_field_factory``, shared by qwen2_5_vl.py and qwen3_vl.py), which the Omni
#: thinkers' factory gives their images too (qwen2_5_omni_thinker.py
#: ``create_qwen2_5_omni_thinker_field_factory``, also qwen3_omni_moe_thinker.py's).
def _qwen_vl_fields(out: PreprocessOutput) -> dict[str, vllm_items.Field]:
    return {"pixel_values": vllm_items.flat_from_sizes(out.tensors["image_grid_thw"].prod(-1)),
            "image_grid_thw": vllm_items.Batched(keep_on_cpu=True)}


#: What each family's image items hold in vLLM (its ``_get_mm_fields_config``): the Qwen-VL
#: and Omni families' (``_qwen_vl_fields``), Llama 4's (mllama4.py) and Inkling's
#: (vllm/models/inkling/common/mm_preprocess.py).
IMAGE_FIELDS: dict[str, Callable[[PreprocessOutput], dict[str, vllm_items.Field]]] = {
    "qwen_vl": _qwen_vl_fields,
    "qwen2_5_omni": _qwen_vl_fields,
    "qwen3_omni": _qwen_vl_fields,
    "llama4": lambda out: {
        "pixel_values": vllm_items.flat_from_sizes(out.tensors["patches_per_image"]),
        "patches_per_image": vllm_items.Batched(keep_on_cpu=True),
        "aspect_ratios": vllm_items.Batched(keep_on_cpu=True),
    },
    "inkling": lambda out: {
        "pixel_values": vllm_items.flat_from_sizes(out.tensors["num_patches"]),
        "num_patches": vllm_items.Batched(keep_on_cpu=True),
    },
}

#: Inkling's ids as vLLM fixes them (mm_preprocess.py ``IMAGE_MARKER_ID``, ``IMAGE_TOKEN_ID``,
#: not read from the checkpoint) and the upscale it applies where the checkpoint sets none.
INKLING_MARKER, INKLING_TOKEN, INKLING_FRAC = 200005, 200054, 2.0

#: The families whose vLLM processor calls the HF image processor itself, not through
#: ``InputProcessingContext.call_hf_processor`` (so nothing is cast to the engine's dtype),
#: and the keys it casts to bfloat16 whatever that dtype (Inkling's
#: ``_apply_hf_processor_main``: ``pixel_values.to(torch.bfloat16)``).
BFLOAT16 = {"inkling": ("pixel_values",)}

#: (marker, image token): the marker vLLM's prompt holds once per image and keeps, the
#: image's tokens after it (Inkling's ``PromptReplacement(target=[IMAGE_MARKER_ID])``, whose
#: replacement is the marker and the patches' tokens), and the family's placeholder.
MARKERS = {"inkling": (INKLING_MARKER, INKLING_TOKEN)}

_TORCHVISION = ("vLLM 0.33.0 runs it with transformers >= 5.16 and torchvision 0.29, whose AutoImageProcessor "
                "loads the image processor's torchvision class ({classes}) where torchvision is installed "
                "(transformers/models/auto/image_processing_auto.py _resolve_backend), while this service reproduces "
                "the PIL class: the pixels differ (scripts/gen_vllm_fixtures.py records by how much)")

#: Why the sidecar does not serve a family: the vLLM 0.33.0 code that decides it.
REFUSED = {
    "llava": _TORCHVISION.format(classes="CLIPImageProcessor, via vllm/model_executor/models/llava.py "
                                 "LlavaProcessingInfo.get_hf_processor"),
    "llava_next": _TORCHVISION.format(classes="LlavaNextImageProcessor, via llava_next.py"),
    "pixtral": _TORCHVISION.format(classes="PixtralImageProcessor, via llava.py PixtralHFProcessingInfo and "
                                   "mistral3.py Mistral3ProcessingInfo") + "; and a mistralai checkpoint holding "
               "params.json and consolidated weights is run by default in Mistral's own format "
               "(vllm/transformers_utils/config.py config_format auto: pixtral.py PixtralForConditionalGeneration, "
               "mistral_common's image encoder, a prompt its tokenizer already expanded)",
    "phi3_v": "vLLM 0.33.0 (model_executor/models/phi3v.py) runs the checkpoint's remote-code Phi3VProcessor and "
              "rewrites the prompt with the checkpoint's tokenizer: the targets are the tokenizer's ids of "
              "<|image_N|>, and _apply_prompt_updates decodes the ids, splits the text on <|image_N|> and encodes "
              "each chunk again; the sidecar has no tokenizer",
    "phi4_multimodal": "vLLM 0.33.0 runs this checkpoint as Phi4MMForCausalLM (model_executor/models/phi4mm.py) "
                       "with its remote-code Phi4MMProcessor, not transformers' Phi4MultimodalImageProcessor this "
                       "service reproduces (its pixels differ; Phi4MultimodalForCausalLM left vLLM in 0.12.0: "
                       "registry.py _PREVIOUSLY_SUPPORTED_MODELS), and its prompt targets are the tokenizer's ids "
                       "of <|image_N|>",
    "inkling2": "vLLM 0.33.0 has no model for it (model types inkling2 and inkling2_loop are not in "
                "model_executor/models/registry.py nor vllm/models)",
}


def check_served(family: Family, audio_families: Iterable[str] = ()) -> None:
    """ValueError unless the sidecar knows what vLLM builds for the family: why not, for a
    family ``REFUSED`` names."""
    name = family.name
    if name in REFUSED:
        raise ValueError(f"the sidecar does not serve the {name} family: {REFUSED[name]}")
    served = {*IMAGE_FIELDS, *audio_families}
    if name not in served:
        raise ValueError(f"the sidecar does not serve the {name} family yet (served: {', '.join(sorted(served))})")
    if isinstance(family, Inkling) and (family.config.image_bos_token_id, family.image_token_id) != (
            INKLING_MARKER, INKLING_TOKEN):
        raise ValueError(f"vLLM's Inkling processor uses the ids {INKLING_MARKER} and {INKLING_TOKEN} whatever the "
                         f"checkpoint says; this checkpoint's are {family.config.image_bos_token_id} and "
                         f"{family.image_token_id}")


def processor_family(family: Family) -> Family:
    """``family`` computing an image's pixels as vLLM's processor for it does: Inkling's
    upscale with Pillow (the family's "pil" processor) by the checkpoint's
    ``rescale_image_frac``, else 2.0; any other family as it is."""
    if not isinstance(family, Inkling):
        return family
    c = family.config
    return Inkling(replace(c, processor="pil", rescale_image_frac=c.rescale_image_frac or INKLING_FRAC))


def image_batch(out: PreprocessOutput, family: str, dtype: str) -> dict[str, Any]:
    """The image tensors as vLLM's processor output holds them, cast as it casts them for
    an engine in ``dtype`` (the fingerprint's): the floating ones to that dtype, as
    ``call_hf_processor`` does (``vllm_items.cast_floats``), or, for a family whose processor
    calls the HF one itself (``BFLOAT16``), as that processor casts them."""
    batch: dict[str, Any] = {"pixel_values": out.pixel_values, **out.tensors}
    if family not in BFLOAT16:
        return vllm_items.cast_floats(batch, dtype)
    for key in BFLOAT16[family]:
        batch[key] = vllm_items.BFloat16.of(batch[key])
    return batch


def service_prompt(family: str, ids: list[int], images: int) -> list[int]:
    """The worker's prompt as the service takes it: where vLLM keeps a marker per image
    (``MARKERS``), the family's placeholder put after each of the first ``images`` markers
    (``after_markers``)."""
    if family not in MARKERS:
        return ids
    return after_markers(ids, *MARKERS[family], images, "image")


def after_markers(ids: list[int], marker: int, placeholder: int, count: int, what: str) -> list[int]:
    """``placeholder`` put after each of the first ``count`` ``marker`` tokens (vLLM replaces
    the first ones, in order; a later one stays text). INVALID_ARGUMENT for a prompt that
    holds the placeholder itself (vLLM would keep it as text; the service cannot)."""
    if not count:
        return ids
    if placeholder in ids:
        raise invalid(f"the prompt holds the {what} token {placeholder} itself: vLLM's prompt carries only the "
                      f"marker {marker} per {what}")
    out: list[int] = []
    for token in ids:
        out.append(token)
        if token == marker and count:
            out.append(placeholder)
            count -= 1
    return out


def vllm_span(family: str, span: tuple[int, int]) -> tuple[int, int]:
    """An image's range in vLLM's terms from the service's: with the marker before the
    image's tokens where vLLM keeps one (its replacement begins with it)."""
    offset, length = span
    return (offset - 1, length + 1) if family in MARKERS else (offset, length)

