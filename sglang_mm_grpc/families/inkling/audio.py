"""Inkling audio: HF ``InklingFeatureExtractor`` + ``InklingProcessor._extract_dmel_bins``
(transformers 5.24), one mono 16 kHz clip at a time.

The extractor (``models/inkling/feature_extraction_inkling.py``): ``hop = duration *
sampling_rate`` and ``window = duration * multiplier * sampling_rate`` samples (each must
be a whole number, ``_to_exact_int``), ``n_fft = n_fft or window``; the clip left-padded
with ``n_fft - hop`` zeros and right-padded to a multiple of ``hop``; ``torch.stft(...,
center=False)`` with ``torch.hann_window(window)``; ``sqrt(clamp_min(re^2 + im^2,
1e-10))``; the slaney mel filters (``mel_filter_bank(n_fft // 2 + 1, feature_size, 0,
sampling_rate / 2, sampling_rate, norm="slaney", mel_scale="slaney")``, float64 cast to
float32); ``clamp_min(1e-10).log10()``: float32 ``[T, feature_size]``, ``T = ceil(samples
/ hop)``. A batch is padded to its longest clip with zeros, which no valid frame of a
shorter clip reads (its frames end at ``ceil(samples / hop) * hop``), and the padded
frames are masked: each clip alone is the same (vLLM calls the extractor on a request's
clips together and keeps ``ids[:n]``). The processor's dMel bins: ``clamp(dmel_min,
dmel_max)``, then the argmin of the distance to ``linspace(min, max, num_dmel_bins)``
(float64, cast to float32), the first on a tie, as int32. One placeholder token per
frame (``replace_audio_token``: the mask's sum).

Defaults, the transformers 5.24 classes': ``InklingFeatureExtractor.__init__`` has
``feature_size=80, sampling_rate=16_000, padding_value=0.0, audio_token_duration_s=0.05,
window_size_multiplier=2.0, n_fft=None`` (hop 800, window and n_fft 1600, 801 bins);
``InklingProcessor.__init__`` has ``num_dmel_bins=16, dmel_min_value=-7.0,
dmel_max_value=2.0``. ``InklingAudioConfig`` (``configuration_inkling.py``) has
``n_mel_bins = 80`` but ``mel_vocab_size = 256``, and the gateway reads its bin count from
``mel_vocab_size``: the two disagree (16 vs 256). vLLM 0.33's Inkling path
(``vllm/models/inkling/common/mm_preprocess.py``) quantizes with the HF processor
(``processor._extract_dmel_bins``), so the checkpoint's ``processor_config.json``
(``num_dmel_bins``, ``dmel_min_value``, ``dmel_max_value``) decides the bins; the model
config's ``audio_config.mel_vocab_size`` (required there, ``configs.py``) only sizes the
embedding (``n_mel_bins * mel_vocab_size`` rows, bin ``b`` of mel ``m`` at ``m *
mel_vocab_size + b``), so the bins must stay below it. ``from_hf`` reads both files the
same way.

Exactness (``kernels.logmel``): the log-mel is computed in float64 from the float32
windowed frames and rounded once, so it is within an ulp or two of the reference's
float32 wherever a band's energy is not far below its frame's; below that, the
reference's own float32 FFT error decides its last digits (see
``tests/audio/test_inkling_audio.py``). The bins are the processor's argmin of our float32
log-mel, exactly.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ...kernels import logmel
from .. import hf_keys

#: The frame's clamps (``clamp_min(1e-10)`` of the power and of the mel).
FLOOR = 1e-10


def exact_int(value: float, name: str, tolerance: float = 1e-6) -> int:
    """The extractor's ``_to_exact_int``: ``value`` rounded, refused unless it is whole."""
    rounded = round(value)
    if abs(value - rounded) > tolerance:
        raise hf_keys.ConfigError(f"{name} must resolve to an integer sample count, got {value}")
    return int(rounded)


@dataclass(frozen=True)
class InklingAudioConfig:
    """The resolved knobs (``preprocessor_config.json`` + ``processor_config.json``);
    the transformers 5.24 class defaults (see the module docstring)."""

    feature_size: int = 80
    sampling_rate: int = 16_000
    hop: int = 800  # audio_token_duration_s (0.05) * sampling_rate
    window_size: int = 1600  # hop * window_size_multiplier (2.0)
    n_fft: int = 1600  # n_fft or window_size
    num_dmel_bins: int = 16
    dmel_min_value: float = -7.0
    dmel_max_value: float = 2.0

    def __post_init__(self) -> None:
        if min(self.feature_size, self.sampling_rate, self.hop, self.window_size, self.num_dmel_bins) <= 0:
            raise hf_keys.ConfigError(f"Inkling audio sizes must be positive: {self}")
        if self.n_fft % 2 or self.window_size > self.n_fft:
            raise hf_keys.ConfigError(f"Inkling audio needs an even n_fft >= the window, got {self.n_fft}, "
                                      f"window {self.window_size}")
        if not (math.isfinite(self.dmel_min_value) and math.isfinite(self.dmel_max_value)) or (
                self.num_dmel_bins > 1 and self.dmel_min_value >= self.dmel_max_value):
            raise hf_keys.ConfigError(f"dmel_min_value must be below dmel_max_value: {self}")

    @classmethod
    def from_hf(cls, preprocessor: dict, processor: dict | None = None) -> InklingAudioConfig:
        """From the extractor's and the processor's JSON (class defaults fill gaps)."""
        g = hf_keys.get
        sr = hf_keys.as_int(g(preprocessor, "sampling_rate", default=16_000), "sampling_rate")
        duration = float(g(preprocessor, "audio_token_duration_s", default=0.05))
        multiplier = float(g(preprocessor, "window_size_multiplier", default=2.0))
        window = exact_int(duration * multiplier * sr, "audio_token_duration_s * window_size_multiplier * sampling_rate")
        proc = processor or {}
        return cls(
            feature_size=hf_keys.as_int(g(preprocessor, "feature_size", default=80), "feature_size"),
            sampling_rate=sr,
            hop=exact_int(duration * sr, "audio_token_duration_s * sampling_rate"),
            window_size=window,
            n_fft=hf_keys.as_int(g(preprocessor, "n_fft", default=window), "n_fft"),
            num_dmel_bins=hf_keys.as_int(g(proc, "num_dmel_bins", default=16), "num_dmel_bins"),
            dmel_min_value=float(g(proc, "dmel_min_value", default=-7.0)),
            dmel_max_value=float(g(proc, "dmel_max_value", default=2.0)),
        )


DEFAULT = InklingAudioConfig()


def mel_filters(cfg: InklingAudioConfig = DEFAULT) -> np.ndarray:
    """float32 [feature_size, n_fft // 2 + 1]: the extractor's ``mel_filters``."""
    bank = logmel.mel_filter_bank(cfg.n_fft // 2 + 1, cfg.feature_size, 0.0, cfg.sampling_rate / 2.0,
                                  cfg.sampling_rate, norm="slaney", mel_scale="slaney")
    return np.ascontiguousarray(bank.T, dtype=np.float32)


def bin_centers(cfg: InklingAudioConfig = DEFAULT) -> np.ndarray:
    """float32 [num_dmel_bins]: the processor's ``bin_centers``."""
    return logmel.linspace_f32(cfg.dmel_min_value, cfg.dmel_max_value, cfg.num_dmel_bins)


@functools.lru_cache(maxsize=8)
def _plan(cfg: InklingAudioConfig) -> logmel.Plan:
    return logmel.plan(cfg.n_fft, cfg.hop, logmel.hann_window(cfg.window_size), mel_filters(cfg), FLOOR, FLOOR)


@functools.lru_cache(maxsize=8)
def _bins(cfg: InklingAudioConfig) -> logmel.Bins:
    return logmel.dmel_bins(bin_centers(cfg), cfg.dmel_min_value, cfg.dmel_max_value, _plan(cfg).mel_floor)


def frames_for(samples: int, cfg: InklingAudioConfig = DEFAULT) -> int:
    """The clip's frames: ``ceil(samples / hop)`` (the extractor's mask sum)."""
    return logmel.frame_count(samples, cfg.hop)


def token_count(samples: int, cfg: InklingAudioConfig = DEFAULT) -> int:
    """Placeholder tokens for the clip: one per frame (``replace_audio_token``)."""
    return frames_for(samples, cfg)


def log_mel(wave, cfg: InklingAudioConfig = DEFAULT) -> np.ndarray:
    """float32 [frames, feature_size]: the extractor's ``input_features`` of one mono clip
    (float32, or cast to float32 as the extractor casts it)."""
    return logmel.log_mel(wave, _plan(cfg))


def dmel_bins(log_mel_features, cfg: InklingAudioConfig = DEFAULT) -> np.ndarray:
    """int32 [frames, feature_size]: the processor's ``_extract_dmel_bins`` of a log-mel."""
    return logmel.quantize_log_mel(log_mel_features, _bins(cfg))


def dmel(wave, cfg: InklingAudioConfig = DEFAULT) -> np.ndarray:
    """int32 [frames, feature_size]: ``dmel_bins(log_mel(wave))`` in one pass (the
    ``audio_input_ids`` of one clip), without the log-mel."""
    return logmel.log_mel_bins(wave, _plan(cfg), _bins(cfg))
