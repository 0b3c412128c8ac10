"""An audio clip as a vLLM 0.33 engine takes it: the item's fields and its prompt range.

vLLM loads a clip with ``AudioMediaIO.load_bytes`` (``load_audio``: float32 mono at the
stream's rate) and resamples it to the extractor's rate in its data parser
(``MultiModalDataParser._parse_audio_data``, torchaudio's resampler): the waveform
``media.audio`` gives. The clip's key is built on that waveform, an ``ndarray`` item
(``get_item_for_hash`` is the parsed clip).

Qwen3-ASR (``model_executor/models/qwen3_asr.py``): the processor runs on each clip alone
(``_call_hf_processor``), and ``_postprocess_hf_mm_data`` keeps each clip's masked frames
of ``input_features`` joined along the frames (``input_audio_features`` [128, sum of T]),
the processor's int32 mask of each clip (its frames padded to a multiple of ``2 *
n_window``) as ``feature_attention_mask``, and the frame counts as int64
``audio_feature_lengths``; ``_qwen3asr_field_config`` splits them (the features along dim
1). The prompt's ``<|audio_pad|>`` becomes ``[audio_token_id] * n`` tokens
(``_get_prompt_updates``), the family's own expansion.

Qwen2-Audio (``qwen2_audio.py``): the processor on the request's clips with
``truncation=True``, each padded to 30 s: ``input_features`` [128, 3000] and its int32
``feature_attention_mask``, both batched (``_qwen2audio_field_config``): the family's own
tensors; ``<|AUDIO|>`` becomes ``[audio_token_id] * n``.

Inkling (``vllm/models/inkling/common/mm_preprocess.py``): the extractor on the request's
clips, their dMel bins (int32) cut to each clip's frames and joined
(``input_audio_features``, ``flat_from_sizes`` by the int64 ``num_audio_tokens``): the
family's own tensors. The prompt carries a ``<|content_audio_input|>`` marker (200020) per
clip, which vLLM replaces by itself and ``<|unused_200053|>`` per frame, with ``is_embed``
on those: ids vLLM fixes whatever the checkpoint says (``AUDIO_MARKER_ID``,
``AUDIO_TOKEN_ID``), as for its images.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..core.carriers import PreprocessOutput
from ..families import Family
from . import vllm_image, vllm_items

#: What each family's audio items hold in vLLM.
AUDIO_FIELDS: dict[str, Callable[[PreprocessOutput], dict[str, vllm_items.Field]]] = {
    "qwen3_asr": lambda out: {
        "input_audio_features": vllm_items.flat_from_sizes(out.audio_tensors["audio_feature_lengths"], dim=1),
        "feature_attention_mask": vllm_items.Batched(keep_on_cpu=True),
        "audio_feature_lengths": vllm_items.Batched(keep_on_cpu=True),
    },
    "qwen2_audio": lambda out: {
        "input_features": vllm_items.Batched(),
        "feature_attention_mask": vllm_items.Batched(),
    },
    "inkling": lambda out: {
        "input_audio_features": vllm_items.flat_from_sizes(out.audio_tensors["num_audio_tokens"]),
        "num_audio_tokens": vllm_items.Batched(keep_on_cpu=True),
    },
}
#: Families whose vLLM prompt keeps a marker per clip: (marker, placeholder).
AUDIO_MARKERS = {"inkling": (200020, 200053)}


def takes_audio(family: Family) -> bool:
    """Whether the sidecar knows what vLLM builds of this model's clips."""
    return family.name in AUDIO_FIELDS and "audio" in family.modalities


def check_ids(family: Family) -> None:
    """ValueError where the checkpoint's audio ids are not the ones vLLM's processor fixes."""
    fixed = AUDIO_MARKERS.get(family.name)
    config = getattr(family, "config", None)
    ids = (getattr(config, "audio_bos_token_id", None), getattr(family, "audio_token_id", None))
    if fixed is not None and ids != fixed:
        raise ValueError(f"vLLM's {family.name} processor uses the audio ids {fixed} (marker, placeholder) whatever "
                         f"the checkpoint says; this checkpoint's are {ids}")


def service_prompt(family: str, ids: list[int], audios: int) -> list[int]:
    """The worker's prompt as the service takes it: the family's placeholder after each of
    the first ``audios`` markers where vLLM keeps one per clip (``AUDIO_MARKERS``)."""
    if family not in AUDIO_MARKERS:
        return ids
    return vllm_image.after_markers(ids, *AUDIO_MARKERS[family], audios, "audio")


def vllm_span(family: str, span: tuple[int, int]) -> tuple[int, int]:
    """A clip's range in vLLM's terms: with its marker, where vLLM keeps one."""
    offset, length = span
    return (offset - 1, length + 1) if family in AUDIO_MARKERS else (offset, length)


def audio_batch(out: PreprocessOutput, family: str, chunk: int = 100) -> dict[str, Any]:
    """The clips' tensors as vLLM's processor leaves them, before any cast: Inkling's and
    Qwen2-Audio's are the family's; Qwen3-ASR's are the service's batched ``[clips, 128, Tmax]`` features cut
    to each clip's frames and joined, and each clip's mask as the processor pads it (to a
    multiple of ``chunk`` frames, int32)."""
    if family != "qwen3_asr":
        return dict(out.audio_tensors)
    feats, lengths = out.audio_tensors["input_audio_features"], out.audio_tensors["audio_feature_lengths"]
    masks = []
    for n in lengths.tolist():
        mask = np.zeros(-(-n // chunk) * chunk, np.int32)
        mask[:n] = 1
        masks.append(mask)
    return {"input_audio_features": np.concatenate([feats[i, :, :n] for i, n in enumerate(lengths.tolist())], axis=1),
            "feature_attention_mask": masks, "audio_feature_lengths": lengths.astype(np.int64)}
