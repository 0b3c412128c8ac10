"""Qwen3-ASR: audio only, HF ``Qwen3ASRFeatureExtractor`` + ``Qwen3ASRProcessor``
(transformers 5.24), one mono 16 kHz clip at a time, as vLLM 0.33 runs them.

The extractor (``models/qwen3_asr/feature_extraction_qwen3_asr.py``): a clip shorter than
``min_length`` (8000) samples is zero-padded to it (``__call__``, "matching the original
Qwen3-ASR library"), then ``_torch_extract_fbank_features``: ``torch.stft(n_fft=400,
hop=160, window=hann_window(400), center=True)`` (reflect padding), ``stft[..., :-1]``
(the last frame dropped), ``abs() ** 2``, the slaney mel filters (128 bands, 0-8000 Hz,
float64 cast to float32) as a float32 matmul, ``clamp(min=1e-10).log10()``, the clip's
maximum less 8 as a floor, ``(x + 4) / 4``: float32 ``[128, T]``, ``T = max(L, 8000) //
160``. The processor's ``padding=True`` pads a batch to its longest clip, which changes
a shorter clip's features (its reflection reads the zeros, its max covers the padded
frames); vLLM (``model_executor/models/qwen3_asr.py:282-309``, ``_call_hf_processor``)
therefore calls the processor on each clip alone, and so does this family. The mel axis
is then zero-padded to a multiple of ``2 * n_window`` (100) with a 0 mask; vLLM keeps the
masked frames only (``_postprocess_hf_mm_data``, 311-329).

Tokens: ``_get_audio_token_length`` (``processing_qwen3_asr.py:410-418``, vLLM's
``_get_feat_extract_output_lengths``, ``qwen3_asr.py:175-181``): ``13 * (T // 100)`` plus
the three stride-2 convolutions of the last ``T % 100`` frames. The clip's placeholder
``<|audio_pad|>`` (``audio_token_id`` 151676, ``configuration_qwen3_asr.py:119``) becomes
that many ``<|audio_pad|>``; ``<|audio_start|>`` / ``<|audio_end|>`` around it stay ordinary
tokens (vLLM's replacement is ``[audio_token_id] * n``), whose ids the checkpoint's tokenizer
holds (not its config.json), so they are not named here.

Tensors: ``whisper_features.batch``, the layout the gateway sends TokenSpeed (smg
``registry/qwen3_asr.rs:147-160``); vLLM's own processor's ``input_audio_features`` is
``flat_from_sizes(dim=1)`` (``qwen3_asr.py:248-257``), a split on dim 1 that
``FieldLayout`` does not express. TokenSpeed gets one item per clip (``[1, 128, Tmax]``,
its mask row and length); a one-clip request carries no padding.

Images and videos: none (FAILED_PRECONDITION, ``modalities`` is ``("audio",)``). The
image token the contract asks for is ``<|image_pad|>`` (151655 in Qwen3's vocabulary), never
the audio one; no request reaches it.

The log-mel, its exactness and the batched tensors: ``whisper_features``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.carriers import AudioOptions
from ...core.errors import Code, PreprocessError
from ...core.layout import Expansion
from .. import hf_keys
from ..audio import AudioOnly, AudioPlan, kept_samples
from . import whisper_features
from .whisper_features import features, mel_filters, token_count

__all__ = ["Qwen3ASR", "Qwen3ASRAudioConfig", "Qwen3ASRConfig", "config_from_hf", "features", "frames_for",
           "matches", "mel_filters", "token_count"]

MODEL_TYPES = ("qwen3_asr",)
EXTRACTOR = "Qwen3ASRFeatureExtractor"


@dataclass(frozen=True)
class Qwen3ASRAudioConfig(whisper_features.LogMelConfig):
    """The extractor's knobs (``preprocessor_config.json``): transformers 5.24's
    ``Qwen3ASRFeatureExtractor.__init__`` defaults (``min_length`` 8000)."""

    min_length: int = 8000


@dataclass(frozen=True)
class Qwen3ASRConfig:
    audio_token_id: int = 151676  # <|audio_pad|>
    image_token_id: int = 151655  # <|image_pad|>: never used, distinct from the audio token
    audio: Qwen3ASRAudioConfig = Qwen3ASRAudioConfig()


def audio_config_from_hf(fe: dict) -> Qwen3ASRAudioConfig:
    d, g = Qwen3ASRAudioConfig(), hf_keys.get
    return Qwen3ASRAudioConfig(**whisper_features.config_from_hf(fe, g(fe, "n_window", default=d.n_window), d),
                               min_length=int(g(fe, "min_length", default=d.min_length)))


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> Qwen3ASRConfig:
    """From preprocessor_config.json (or processor_config.json's ``feature_extractor``) and
    config.json (top level, or vLLM's original layout under ``thinker_config``)."""
    d = Qwen3ASRConfig()
    fe = preprocessor if preprocessor.get("feature_extractor_type") else (processor or {}).get("feature_extractor") or {}
    top = {**(config.get("thinker_config") or {}), **config}
    return Qwen3ASRConfig(
        audio_token_id=hf_keys.token_id(top, "audio_token_id", "audio_token_index", default=d.audio_token_id),
        audio=audio_config_from_hf(fe),
    )


def matches(preprocessor: dict, config: dict) -> bool:
    if config.get("model_type") in MODEL_TYPES:
        return True
    return not config.get("model_type") and preprocessor.get("feature_extractor_type") == EXTRACTOR


def frames_for(samples: int, cfg: Qwen3ASRAudioConfig) -> int:
    """``max(samples, min_length) // hop``: the extractor's mask sum."""
    return max(int(samples), cfg.min_length) // cfg.hop_length


@dataclass(frozen=True)
class ExtractorCall:
    """The extractor a request's options configure: the model's, and the samples kept."""

    config: Qwen3ASRAudioConfig
    max_samples: int | None = None  # truncation=True, max_length (None: the whole clip)

    def total(self, samples: int) -> int:
        """The samples the STFT reads: the clip zero-padded to ``min_length``, then cut to
        ``max_samples`` (the extractor pads first, ``pad(truncation=True)`` cuts after)."""
        n = max(int(samples), self.config.min_length)
        return n if self.max_samples is None else min(n, self.max_samples)


class Qwen3ASR(AudioOnly[Qwen3ASRConfig, ExtractorCall]):
    name = "qwen3_asr"
    audio_features_key = "input_audio_features"
    reference_processor = "Qwen3ASRFeatureExtractor + Qwen3ASRProcessor (one clip per call, as vLLM)"

    def __init__(self, config: Qwen3ASRConfig):
        super().__init__(config, config.image_token_id, config.audio_token_id, whisper_features.field_layout())

    def audio_config(self, options: AudioOptions | None = None) -> ExtractorCall:
        cfg = self.config.audio
        return ExtractorCall(cfg, kept_samples(options, cfg.sampling_rate))

    def sampling_rate(self, config: ExtractorCall) -> int:
        return config.config.sampling_rate

    def plan_audio(self, config: ExtractorCall, samples: int, item: int) -> AudioPlan:
        if samples <= 0:
            raise PreprocessError(Code.INVALID_ARGUMENT, "the clip has no samples", item=item, kind="audio")
        total = config.total(samples)
        frames = total // config.config.hop_length
        if frames == 0 or total <= config.config.n_fft // 2:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"{total} samples make no feature frame (hop "
                                  f"{config.config.hop_length}, n_fft {config.config.n_fft})", item=item, kind="audio")
        tokens = token_count(frames, config.config.n_window)
        return AudioPlan(min(samples, total), frames, Expansion.repeat(self.audio_token_id, tokens))

    def process_audio(self, config: ExtractorCall, wave: np.ndarray, plan: AudioPlan) -> dict[str, np.ndarray]:
        feats = features(wave[:plan.samples], config.config, config.total(plan.samples))
        return {"input_audio_features": feats, "audio_feature_lengths": np.array([plan.frames], np.int64)}

    def audio_batch(self, clips: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return whisper_features.batch(clips)

    def warmup(self) -> None:
        whisper_features.warmup(self.config.audio)
