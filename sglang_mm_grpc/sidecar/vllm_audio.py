"""An audio clip as a vLLM 0.33 engine takes it: the item's fields, and vLLM's cache key.

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
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..core.carriers import PreprocessOutput
from ..families import Family
from . import vllm_items

#: What each family's audio items hold in vLLM.
AUDIO_FIELDS: dict[str, Callable[[PreprocessOutput], dict[str, vllm_items.Field]]] = {
    "qwen3_asr": lambda out: {
        "input_audio_features": vllm_items.flat_from_sizes(out.audio_tensors["audio_feature_lengths"], dim=1),
        "feature_attention_mask": vllm_items.Batched(keep_on_cpu=True),
        "audio_feature_lengths": vllm_items.Batched(keep_on_cpu=True),
    },
}


def takes_audio(family: Family) -> bool:
    """Whether the sidecar knows what vLLM builds of this model's clips."""
    return family.name in AUDIO_FIELDS and "audio" in family.modalities


def audio_batch(out: PreprocessOutput, chunk: int = 100) -> dict[str, Any]:
    """The clips' tensors as vLLM's Qwen3-ASR processor leaves them, before its cast to the
    engine's dtype: the service's batched ``[clips, 128, Tmax]`` features cut to each clip's
    frames and joined, and each clip's mask as the processor pads it (to a multiple of
    ``chunk`` frames, int32)."""
    feats, lengths = out.audio_tensors["input_audio_features"], out.audio_tensors["audio_feature_lengths"]
    masks = []
    for n in lengths.tolist():
        mask = np.zeros(-(-n // chunk) * chunk, np.int32)
        mask[:n] = 1
        masks.append(mask)
    return {"input_audio_features": np.concatenate([feats[i, :, :n] for i, n in enumerate(lengths.tolist())], axis=1),
            "feature_attention_mask": masks, "audio_feature_lengths": lengths.astype(np.int64)}
