"""The Whisper log-mel both Qwen audio families run, and their clips' batched layout.

transformers 5.24 ``WhisperFeatureExtractor._torch_extract_fbank_features`` (Qwen3-Omni)
and its copy in ``Qwen3ASRFeatureExtractor`` (Qwen3-ASR): ``torch.stft(n_fft=400, hop=160,
window=hann_window(400), center=True)`` (reflect padding), ``stft[..., :-1]`` (the last
frame dropped), ``abs() ** 2``, the slaney mel filters (128 bands, 0-8000 Hz, float64 cast
to float32) as a float32 matmul, ``clamp(min=1e-10).log10()``, the clip's maximum less 8
as a floor, ``(x + 4) / 4``: float32 ``[128, T]``, ``T = samples // 160``. Qwen3-ASR's copy
first zero-pads a clip shorter than ``min_length`` samples to it.

Tokens: the chunked encoder's ``_get_feat_extract_output_lengths`` (``n_window`` 50):
``13 * (T // 100)`` plus the three stride-2 convolutions of the last ``T % 100`` frames.

Tensors: the layout the gateway sends (smg ``audio/processors/qwen3_audio.rs:205-268``):
``input_audio_features`` float32 ``[clips, 128, Tmax]`` (each clip's frames, zero after
them), ``feature_attention_mask`` int64 ``[clips, Tmax]`` and ``audio_feature_lengths``
int64 ``[clips]``, all batched; vLLM's Qwen3-ASR and Qwen3-Omni models take this form
besides their own flat one ("inputs features from rust frontend is batched and padded",
``qwen2_5_omni_thinker.py`` ``_parse_and_validate_audio_input``) and keep the mask and
lengths on the CPU.

Exactness (``kernels.logmel``): the log-mel is computed in float64 from the float32
windowed frames (torch's own float32 window, an ulp or so from torch's on a few values)
and rounded once; the reference's float32 FFT and matmul decide its last digits, so the
features are within a measured bound, not equal (``tests/audio/test_qwen3_asr.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ...core.carriers import FieldLayout
from ...kernels import logmel
from .. import hf_keys

#: ``clamp(min=1e-10)`` of the mel.
FLOOR = 1e-10
#: Tokens per full chunk of ``2 * n_window`` frames (three stride-2 convolutions of 100).
CHUNK_TOKENS = 13
#: The clips' tensors, the features first (the encoder input).
KEYS = ("input_audio_features", "feature_attention_mask", "audio_feature_lengths")


@dataclass(frozen=True)
class LogMelConfig:
    """The extractor's knobs (``preprocessor_config.json``): transformers 5.24's
    ``WhisperFeatureExtractor`` as the Qwen checkpoints set it (128 mel bands)."""

    feature_size: int = 128
    sampling_rate: int = 16_000
    hop_length: int = 160
    n_fft: int = 400
    n_window: int = 50
    min_length: int = 0

    def __post_init__(self) -> None:
        if min(self.feature_size, self.sampling_rate, self.hop_length, self.n_fft, self.n_window) <= 0 or (
                self.n_fft % 2 or self.min_length < 0):
            raise hf_keys.ConfigError(f"Qwen audio sizes must be positive (an even n_fft): {self}")


def config_from_hf(fe: dict, n_window: int, default: LogMelConfig) -> dict:
    """The knobs ``fe`` (the feature extractor's JSON) sets over ``default``, as keyword
    arguments of a ``LogMelConfig``; a dithering extractor is refused."""
    g = hf_keys.get
    dither = g(fe, "dither", default=0.0)
    if dither:
        raise hf_keys.ConfigError(f"dither={dither} adds random noise: not reproducible, not supported")
    return dict(
        feature_size=hf_keys.as_int(g(fe, "feature_size", default=default.feature_size), "feature_size"),
        sampling_rate=hf_keys.as_int(g(fe, "sampling_rate", default=default.sampling_rate), "sampling_rate"),
        hop_length=hf_keys.as_int(g(fe, "hop_length", default=default.hop_length), "hop_length"),
        n_fft=hf_keys.as_int(g(fe, "n_fft", default=default.n_fft), "n_fft"),
        n_window=hf_keys.as_int(n_window, "n_window"),
    )


def token_count(frames: int, n_window: int = 50) -> int:
    """``_get_feat_extract_output_lengths`` of ``frames`` mel frames (Python's floor
    division, as torch's)."""
    chunk = 2 * n_window
    feat = (frames % chunk - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (frames // chunk) * CHUNK_TOKENS


def conv_token_count(frames: int) -> int:
    """Qwen2-Audio's and Qwen2.5-Omni's tokens of ``frames`` mel frames: two stride-2
    convolutions, no chunks (``(((l - 1) // 2 + 1) - 2) // 2 + 1``; 0 for 2 frames or fewer)."""
    return (((frames - 1) // 2 + 1) - 2) // 2 + 1


def mel_filters(cfg: LogMelConfig) -> np.ndarray:
    """float32 [feature_size, n_fft // 2 + 1]: the extractor's filters (``max_frequency``
    8000 Hz, fixed there, whatever the rate)."""
    bank = logmel.mel_filter_bank(cfg.n_fft // 2 + 1, cfg.feature_size, 0.0, 8000.0, cfg.sampling_rate,
                                  norm="slaney", mel_scale="slaney")
    return np.ascontiguousarray(bank.T, dtype=np.float32)


@functools.lru_cache(maxsize=8)
def _plan(cfg: LogMelConfig) -> logmel.Plan:
    return logmel.plan(cfg.n_fft, cfg.hop_length, logmel.hann_window(cfg.n_fft), mel_filters(cfg), 0.0, FLOOR,
                       power=2, center=True)


def features(wave, cfg: LogMelConfig, total: int | None = None) -> np.ndarray:
    """float32 [feature_size, frames]: the extractor's ``input_features`` of one mono clip
    (its mask's frames), the clip zero-padded (or cut) to ``total`` samples (default
    ``max(len, min_length)``) first."""
    w = np.ascontiguousarray(wave, dtype=np.float32).reshape(-1)
    n = max(len(w), cfg.min_length) if total is None else total
    out = np.empty((cfg.feature_size, logmel.centered_frame_count(n, cfg.hop_length)), np.float32)
    k = _log_mel_head(w[:n], n, cfg, out)
    if k:
        head = out[:, :k]  # maximum(x, x.max() - 8), (x + 4) / 4, each step in float32 as torch's
        np.maximum(head, np.float32(head.max()) - np.float32(8.0), out=head)
        head += np.float32(4.0)
        head /= np.float32(4.0)
        out[:, k:] = out[:, k - 1:k]
    return out


def _log_mel_head(w: np.ndarray, n: int, cfg: LogMelConfig, out: np.ndarray) -> int:
    """The log-mel frames of ``w`` zero-padded to ``n`` samples into ``out`` [mels, frames],
    up to the first that reads zeros only (a frame reads ``n_fft`` samples): every frame
    after it is the same silent one, so a long silent tail (Qwen2-Audio's 30 s buffer) is
    not computed, only copied. Returns the frames computed."""
    reach = -(-(len(w) + cfg.n_fft + cfg.hop_length) // cfg.hop_length) * cfg.hop_length
    size = min(n, reach)  # past reach: reflected zeros
    padded = w if len(w) == size else np.concatenate([w, np.zeros(size - len(w), np.float32)])
    k = logmel.centered_frame_count(size, cfg.hop_length)
    if k:
        logmel.log_mel_centered(padded, _plan(cfg), out=out, by_mel=True)  # its first k columns
    return k


def field_layout() -> FieldLayout:
    return FieldLayout(batched=KEYS, keep_on_cpu=KEYS[1:], encoder_input_key=KEYS[0])


def batch(clips: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The clips' ``input_audio_features`` [128, T] and ``audio_feature_lengths`` [1],
    padded to the longest clip with its mask."""
    lengths = np.concatenate([c["audio_feature_lengths"] for c in clips])
    longest = int(lengths.max())
    feats = np.zeros((len(clips), clips[0]["input_audio_features"].shape[0], longest), np.float32)
    mask = np.zeros((len(clips), longest), np.int64)
    for i, c in enumerate(clips):
        n = int(lengths[i])
        feats[i, :, :n] = c["input_audio_features"]
        mask[i, :n] = 1
    return {"input_audio_features": feats, "feature_attention_mask": mask, "audio_feature_lengths": lengths}


def warmup(cfg: LogMelConfig) -> None:
    for n in (cfg.n_fft, cfg.min_length + 3 * cfg.hop_length + 7):
        features(np.zeros(n, np.float32), cfg)
