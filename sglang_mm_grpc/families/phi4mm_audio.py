"""Phi-4-multimodal audio: HF ``Phi4MultimodalFeatureExtractor`` (transformers 5.24,
``feature_extraction_phi4_multimodal.py``), one mono 16 kHz clip at a time.

The extractor (its torch path): frames of ``win_length`` (400) samples every ``hop_length``
(160), not centred, ``T = (L - 400) // 160 + 1``; in each frame a pre-emphasis (``x[i] -
0.97 x[i - 1]``, the first sample against itself) and ``* 32768``, in float32; a float64
Hamming window (``periodic=False``), ``rfft`` in 512 points, the spectrum rounded to
complex64, ``|X|^2`` in float32, the mel filters (80 bands, 0-7690 Hz, kaldi scale,
triangular in mel space; float64 cast to float32), ``clamp(min=1.0)`` and the natural log:
float32 ``[T, 80]``. ``audio_embed_sizes``: ``ceil(ceil(T * stride / 8) / 1)`` tokens of the
clip's ``<|endoftext11|>`` (``audio_token_id`` 200011, ``Phi4MultimodalProcessor.
replace_audio_token``). A clip under 400 samples makes no frame and is refused.

Here (``kernels.fbank``, fused) the same operations in the same precisions: the
pre-emphasis in float32, the window and the FFT in float64, the spectrum rounded to
complex64, its magnitude and square in float32; the mel bands summed in float64 and the
log taken in float64, each rounded once. The log-mel kernel (``kernels.logmel``) windows in
float32, which moves bands far below a frame's peak by more than this extractor's own
float32 tail does. torch sums its float32 matmul in another order and rounds its log its
own way, so the features are within a measured bound of the reference
(``tests/audio/test_phi4_audio.py``), not equal.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..kernels import fbank, logmel
from . import hf_keys

AUDIO_TOKEN_ID = 200011  # <|endoftext11|>


@dataclass(frozen=True)
class Phi4AudioConfig:
    """The extractor's knobs: ``Phi4MultimodalFeatureExtractor.__init__`` defaults."""

    feature_size: int = 80
    sampling_rate: int = 16_000
    hop_length: int = 160
    n_fft: int = 512
    win_length: int = 400
    preemphasis: float = 0.97
    audio_compression_rate: int = 8
    audio_downsample_rate: int = 1
    audio_feat_stride: int = 1
    mel_min_frequency: float = 0.0
    mel_max_frequency: float = 7690.0

    def __post_init__(self) -> None:
        if min(self.feature_size, self.sampling_rate, self.hop_length, self.win_length, self.audio_compression_rate,
               self.audio_downsample_rate, self.audio_feat_stride) <= 0 or self.n_fft < self.win_length or self.n_fft % 2:
            raise hf_keys.ConfigError(f"Phi-4-multimodal audio sizes must be positive, n_fft even and >= win: {self}")


def config_from_hf(fe: dict) -> Phi4AudioConfig:
    d, g = Phi4AudioConfig(), hf_keys.get
    knobs: dict = {k: hf_keys.as_int(g(fe, k, default=getattr(d, k)), k) for k in (
        "feature_size", "sampling_rate", "hop_length", "n_fft", "win_length", "audio_compression_rate",
        "audio_downsample_rate", "audio_feat_stride")}
    knobs.update({k: float(g(fe, k, default=getattr(d, k))) for k in ("preemphasis", "mel_min_frequency",
                                                                         "mel_max_frequency")})
    return Phi4AudioConfig(**knobs)


def frame_count(samples: int, cfg: Phi4AudioConfig) -> int:
    """``(L - win) // hop + 1`` frames (none under ``win`` samples)."""
    return max(0, (int(samples) - cfg.win_length) // cfg.hop_length + 1) if samples >= cfg.win_length else 0


def embed_size(frames: int, cfg: Phi4AudioConfig) -> int:
    """``_compute_audio_embed_size`` of ``frames * audio_feat_stride``."""
    n = -(-frames * cfg.audio_feat_stride // cfg.audio_compression_rate)
    return -(-n // cfg.audio_downsample_rate)


def mel_filters(cfg: Phi4AudioConfig) -> np.ndarray:
    """float32 [mels, n_fft / 2 + 1]: the extractor's ``mel_filter_bank(...,
    triangularize_in_mel_space=True, mel_scale="kaldi")``."""
    bank = logmel.mel_filter_bank(cfg.n_fft // 2 + 1, cfg.feature_size, cfg.mel_min_frequency, cfg.mel_max_frequency,
                                  cfg.sampling_rate, mel_scale="kaldi", triangularize_in_mel_space=True)
    return np.ascontiguousarray(bank.T, dtype=np.float32)


def hamming(n: int) -> np.ndarray:
    """``torch.hamming_window(n, periodic=False, dtype=float64)``: ``0.54 - 0.46 cos(2 pi k / (n - 1))``."""
    return 0.54 - 0.46 * np.cos(2.0 * math.pi * np.arange(n) / (n - 1))


@functools.lru_cache(maxsize=4)
def _plan(cfg: Phi4AudioConfig) -> fbank.Plan:
    """The kernel's plan: the float64 window, the FFT's tables, the float32 filters' bands."""
    return fbank.plan(cfg.win_length, cfg.hop_length, cfg.n_fft, cfg.preemphasis, 32768.0, hamming(cfg.win_length),
                      np.ascontiguousarray(mel_filters(cfg).T))


def features(wave, cfg: Phi4AudioConfig) -> np.ndarray:
    """float32 [frames, mels]: the extractor's ``audio_input_features`` of one mono clip."""
    w = np.ascontiguousarray(wave, dtype=np.float32).reshape(-1)
    out = np.empty((frame_count(len(w), cfg), cfg.feature_size), np.float32)
    if len(out):
        fbank.log_fbank(w, _plan(cfg), out)
    return out
