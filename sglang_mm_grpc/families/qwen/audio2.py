"""Qwen2-Audio: audio only, HF ``WhisperFeatureExtractor`` + ``Qwen2AudioProcessor``
(transformers 5.24), as vLLM 0.33 runs them (``model_executor/models/qwen2_audio.py``).

The processor calls the extractor with ``padding="max_length"`` (``_process_audio``) and its
default ``truncation=True``: every clip is cut to, and zero-padded to, ``n_samples``
(30 s, 480000 samples), so a batch changes no clip. The log-mel is ``whisper_features``' on
that buffer: 3000 frames, the clip's maximum (over all of them) less 8 as a floor, which
the padded frames take. The mask (``feature_attention_mask``, int32) marks ``ceil(samples /
160)`` frames (the ``[::160]`` rescale of the sample mask; no frame dropped, 480000 being a
multiple of 160).

Tokens: ``num_audio_tokens = (((l - 1) // 2 + 1) - 2) // 2 + 1`` of the mask's sum ``l``
(vLLM's ``_get_feat_extract_output_lengths``); a clip's ``<|AUDIO|>`` (``audio_token_index``
151646) becomes that many; one of 2 frames or fewer makes none, which vLLM refuses ("too
short"): refused here (INVALID_ARGUMENT).

Tensors: vLLM's fields (``_qwen2audio_field_config``): ``input_features`` float32 ``[clips,
128, 3000]`` and ``feature_attention_mask`` int32 ``[clips, 3000]``, both batched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.carriers import AudioOptions, FieldLayout
from ...core.errors import Code, PreprocessError
from ...core.layout import Expansion
from .. import hf_keys
from ..audio import AudioOnly, AudioPlan, kept_samples
from . import whisper_features

MODEL_TYPES = ("qwen2_audio",)
PROCESSOR = "Qwen2AudioProcessor"


@dataclass(frozen=True)
class Qwen2AudioConfig:
    audio_token_id: int = 151646  # <|AUDIO|>
    image_token_id: int = 151655  # never used, distinct from the audio token
    audio: whisper_features.LogMelConfig = whisper_features.LogMelConfig()
    n_samples: int = 480_000  # chunk_length (30 s) x sampling_rate


def matches(preprocessor: dict, config: dict) -> bool:
    return config.get("model_type") in MODEL_TYPES or preprocessor.get("processor_class") == PROCESSOR


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> Qwen2AudioConfig:
    """From preprocessor_config.json (the extractor) and config.json."""
    d = Qwen2AudioConfig()
    audio = whisper_features.LogMelConfig(**whisper_features.config_from_hf(preprocessor, d.audio.n_window, d.audio))
    chunk = hf_keys.get(preprocessor, "chunk_length", default=d.n_samples // audio.sampling_rate)
    n_samples = hf_keys.as_int(hf_keys.get(preprocessor, "n_samples", default=int(chunk) * audio.sampling_rate),
                               "n_samples")
    return Qwen2AudioConfig(
        audio_token_id=hf_keys.token_id(config, "audio_token_index", "audio_token_id", default=d.audio_token_id),
        audio=audio, n_samples=n_samples)


#: ``num_audio_tokens`` of the mask's frames.
token_count = whisper_features.conv_token_count


class Qwen2Audio(AudioOnly[Qwen2AudioConfig, int]):
    """The extractor call is the samples kept (``n_samples``, or fewer by ``max_seconds``)."""

    name = "qwen2_audio"
    audio_features_key = "input_features"
    reference_processor = "WhisperFeatureExtractor + Qwen2AudioProcessor (padding max_length)"

    def __init__(self, config: Qwen2AudioConfig):
        keys = ("input_features", "feature_attention_mask")
        super().__init__(config, config.image_token_id, config.audio_token_id,
                         FieldLayout(batched=keys, encoder_input_key=keys[0]))

    def audio_config(self, options: AudioOptions | None = None) -> int:
        kept = kept_samples(options, self.config.audio.sampling_rate)
        return self.config.n_samples if kept is None else min(kept, self.config.n_samples)

    def sampling_rate(self, config: int) -> int:
        return self.config.audio.sampling_rate

    def plan_audio(self, config: int, samples: int, item: int) -> AudioPlan:
        kept = min(int(samples), config)
        frames = -(-kept // self.config.audio.hop_length)
        tokens = token_count(frames)
        if tokens <= 0:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"{kept} samples make {frames} feature frame(s) and no "
                                  "token (vLLM refuses it as too short)", item=item, kind="audio")
        return AudioPlan(kept, frames, Expansion.repeat(self.audio_token_id, tokens))

    def process_audio(self, config: int, wave: np.ndarray, plan: AudioPlan) -> dict[str, np.ndarray]:
        feats = whisper_features.features(wave[:plan.samples], self.config.audio, self.config.n_samples)
        mask = np.zeros(feats.shape[1], np.int32)
        mask[:plan.frames] = 1
        return {"input_features": feats[None], "feature_attention_mask": mask[None]}

    def audio_batch(self, clips: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {k: np.concatenate([c[k] for c in clips]) for k in ("input_features", "feature_attention_mask")}

    def warmup(self) -> None:
        whisper_features.warmup(self.config.audio)
        whisper_features.features(np.zeros(1000, np.float32), self.config.audio, self.config.n_samples)
