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

The Omni thinkers (``qwen2_5_omni_thinker.py``, ``qwen3_omni_moe_thinker.py``): the
processor on the request's clips together (with its images and videos, which it processes
apart), its features cast, then ``_postprocess_hf_mm_data`` keeps each clip's masked frames
joined (``input_audio_features``, flat along dim 1) and ``feature_attention_mask.sum(-1)``
as int64 ``audio_feature_lengths``. Qwen2.5-Omni's mask is the extractor's int32 one over its
300 s buffer (``padding="max_length"``); Qwen3-Omni first pads each clip to a multiple of the
hop, the extractor pads the clips to the longest (``padding=True``: a shorter clip's
features computed again here as in that batch, ``_clip_features``), and vLLM replaces the
mask with float32 ``torch.ones(frames)`` per clip, made after the cast. ``<|AUDIO|>`` /
``<|audio_pad|>`` becomes ``[audio_token_id] * n`` (``_get_prompt_updates``, no
``use_audio_in_video``: the gateway sends it false and jobs carry no processor kwargs).

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
from ..core.errors import Code, PreprocessError
from ..families import Family
from ..families.qwen import whisper_features
from . import vllm_image, vllm_items

def _joined_fields(out: PreprocessOutput) -> dict[str, vllm_items.Field]:
    """Qwen3-ASR's (``_qwen3asr_field_config``) and the Omni thinkers'
    (qwen2_5_omni_thinker.py ``create_qwen2_5_omni_thinker_field_factory``, also
    Qwen3-Omni's): the clips' features joined along the frames, split along dim 1."""
    return {
        "input_audio_features": vllm_items.flat_from_sizes(out.audio_tensors["audio_feature_lengths"], dim=1),
        "feature_attention_mask": vllm_items.Batched(keep_on_cpu=True),
        "audio_feature_lengths": vllm_items.Batched(keep_on_cpu=True),
    }


#: What each family's audio items hold in vLLM.
AUDIO_FIELDS: dict[str, Callable[[PreprocessOutput], dict[str, vllm_items.Field]]] = {
    "qwen3_asr": _joined_fields,
    "qwen2_5_omni": _joined_fields,
    "qwen3_omni": _joined_fields,
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


def audio_batch(out: PreprocessOutput, family: Family) -> dict[str, Any]:
    """The clips' tensors as vLLM's processor leaves them, before any cast: Inkling's and
    Qwen2-Audio's are the family's; Qwen3-ASR's and the Omni thinkers' features are each
    clip's frames joined (``_clip_features``), with each clip's mask as vLLM's processor
    leaves it (``MASKS``) and the int64 frame counts."""
    if family.name not in MASKS:
        return dict(out.audio_tensors)
    lengths = out.audio_tensors["audio_feature_lengths"].astype(np.int64)
    return {"input_audio_features": np.concatenate(_clip_features(out, family), axis=1),
            "feature_attention_mask": MASKS[family.name](family, lengths.tolist()),
            "audio_feature_lengths": lengths}


def _asr_masks(family: Family, lengths: list[int], chunk: int = 100) -> list[np.ndarray]:
    """Qwen3-ASR: the processor's int32 mask of each clip alone, padded to a multiple of
    ``chunk`` frames (``2 * n_window``)."""
    masks = []
    for n in lengths:
        mask = np.zeros(-(-n // chunk) * chunk, np.int32)
        mask[:n] = 1
        masks.append(mask)
    return masks


def _buffer_mask(family: Family, lengths: list[int]) -> np.ndarray:
    """Qwen2.5-Omni: the extractor's int32 mask (``padding="max_length"``), every clip's
    ``n_samples`` buffer in frames wide."""
    config = getattr(family, "config")
    mask = np.zeros((len(lengths), -(-config.n_samples // config.audio.hop_length)), np.int32)
    for row, n in zip(mask, lengths):
        row[:n] = 1
    return mask


def _ones_masks(family: Family, lengths: list[int]) -> list[np.ndarray]:
    """Qwen3-Omni: the masks vLLM puts in place of the extractor's, ``torch.ones(frames)``
    per clip (qwen3_omni_moe_thinker.py ``_postprocess_hf_mm_data``): float32, made after the
    cast to the engine's dtype, and a list, which ``vllm_items.cast_floats`` leaves as it is."""
    return [np.ones(n, np.float32) for n in lengths]


#: Each joined family's masks as vLLM's processor leaves them.
MASKS: dict[str, Callable[[Family, list[int]], Any]] = {
    "qwen3_asr": _asr_masks, "qwen2_5_omni": _buffer_mask, "qwen3_omni": _ones_masks}


def _clip_features(out: PreprocessOutput, family: Family) -> list[np.ndarray]:
    """Each clip's feature frames. The service computes a clip alone; vLLM's one extractor
    call on a request's clips pads them to the longest first, so a shorter clip's last
    frames (and the maximum its floor is taken from) read zeros where alone they read the
    clip's reflection: Qwen3-Omni's (``padding=True``: Qwen3OmniMoeProcessor.audio_kwargs;
    each clip zero-padded to a multiple of the hop first, qwen3_omni_moe_thinker.py
    ``_get_hf_mm_inputs``) are computed again as in that batch. Qwen3-ASR calls the
    extractor on each clip alone and Qwen2.5-Omni pads every clip to its ``n_samples``
    buffer: theirs are the service's. Qwen2.5-Omni's clips over that buffer are refused
    (``_check_buffer``)."""
    feats = out.audio_tensors["input_audio_features"]
    lengths = out.audio_tensors["audio_feature_lengths"].tolist()
    clips = [feats[i, :, :n] for i, n in enumerate(lengths)]
    _check_buffer(out, family)
    if family.name != "qwen3_omni":
        return clips
    config = getattr(family, "config").audio
    total = max(lengths) * config.hop_length  # the longest clip, padded to the hop
    return [clip if n * config.hop_length == total else whisper_features.features(wave, config, total)[:, :n]
            for clip, n, wave in zip(clips, lengths, out.audio_waves)]


def _check_buffer(out: PreprocessOutput, family: Family) -> None:
    """RESOURCE_EXHAUSTED for a Qwen2.5-Omni clip longer than the extractor's ``n_samples``:
    vLLM calls its processor with ``truncation=False`` (vllm/multimodal/processing/processor.py
    ``_get_hf_mm_inputs``, for the dummy text the Omni processors pass), which reaches the
    extractor, so such a clip is not cut there, while the service cuts it to the buffer."""
    if family.name != "qwen2_5_omni":
        return
    n_samples = getattr(family, "config").n_samples
    for item, wave in enumerate(out.audio_waves):
        if len(wave) > n_samples:
            raise PreprocessError(Code.RESOURCE_EXHAUSTED, f"the clip has {len(wave)} samples, over the "
                                  f"{n_samples} of Qwen2.5-Omni's extractor buffer: vLLM 0.33.0 calls it with "
                                  "truncation=False, which this sidecar does not reproduce", item=item, kind="audio")
