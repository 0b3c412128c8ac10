"""Inkling audio features (``families/inkling/audio.py`` on ``kernels/logmel.py``) against
transformers 5.24.0's ``InklingFeatureExtractor`` + ``InklingProcessor._extract_dmel_bins``.

The reference outputs are ``tests/audio/fixtures/inkling_features.npz``, written by
``scripts/gen_inkling_audio_fixtures.py`` with transformers 5.24.0 and torch 2.14.0+cu130
(CPU: AVX512 capability, MKL; numpy 2.3.5, Python 3.11): 16 deterministic clips (tones,
a chirp, noise, near-full-scale noise, silence, quiet clips, 16-bit speech-like sound,
1 / 799 / 800 / 801 / 8000 samples, 5 s), a two-clip batch, the window, the bin centers.
These tests need no torch; the filter bank is compared with transformers' numpy function.

What is equal, and why not more:

* Frame and token counts, the bin centers (``torch.linspace`` emulated), the float32 mel
  filters: exactly.
* The log-mel against the same arithmetic done by torch in float64 (``logmel64``, after
  torch's float32 windowing, with our window): bit for bit, every clip. So the kernel
  computes the reference's exact values to float64 accuracy, rounded once.
* The log-mel against the float32 reference: within 1e-6 (measured: 7.2e-7) on every clip
  but the pure tones and the chirp. That is the float32 reference's own rounding (MKL's
  float32 FFT, the float32 matmul, MKL's log10; torch's window takes its cosine from MKL's
  VML and is an ulp off at 51 of 1600 points), a few ulp of the log-mel.
* dMel bins: equal on every clip but the tonal ones (``TONAL``). **Not on those**: in a
  pure tone's frames most bands are many orders of magnitude below the tone, and the
  float32 FFT's error (up to ~47 * 2^-24 * ||frame||_2 per bin, measured on MKL; 64 is
  used here) is not small against them: the reference's log-mel there is off by up to
  ~2e-2 from its exact value (ours), so some of its bins differ (3 of 1600 in ``tones``,
  none of the 1600-3200 in the others). The tests check that every difference is
  explained by that error bound (``_reference_interval``) and is one bin at most.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sglang_mm_grpc.families import hf_keys
from sglang_mm_grpc.families.inkling import audio
from sglang_mm_grpc.kernels import logmel

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "inkling_features.npz"
DATA = np.load(FIXTURE)
META = json.loads(str(DATA["meta"]))
CLIPS = sorted(k[len("wave/"):] for k in DATA.files if k.startswith("wave/"))
#: Clips whose quiet bands the float32 reference cannot resolve (see the docstring).
TONAL = ("tone_440", "tone_fs", "tones", "chirp")
#: The float32 reference against ours, every clip outside TONAL (measured: 7.2e-7).
LOGMEL_TOL = 1e-6
#: Bound on the float32 FFT's error per bin, in units of 2^-24 * ||windowed frame||_2.
FFT_ERR = 64.0


def wave(name: str) -> np.ndarray:
    w = DATA[f"wave/{name}"]
    return w.astype(np.float32) / np.float32(32768.0) if w.dtype == np.int16 else w


def frame_norms(x: np.ndarray, window: np.ndarray) -> np.ndarray:
    """||frame * window||_2 of each frame, as the reference frames the clip."""
    t = audio.frames_for(len(x))
    padded = np.zeros(800 + t * 800, np.float32)
    padded[800:800 + len(x)] = x
    frames = np.lib.stride_tricks.sliding_window_view(padded, 1600)[::800] * window
    return np.linalg.norm(frames.astype(np.float64), axis=1)


def _reference_interval(name: str, ours: np.ndarray):
    """Where the float32 reference's log-mel can lie given ours (its exact value): each
    bin's FFT error at most FFT_ERR * 2^-24 * ||frame||, so each mel off by at most that
    times the filter's sum, the magnitudes never below the clamp, plus LOGMEL_TOL."""
    sums = audio.mel_filters().astype(np.float64).sum(1)
    err = FFT_ERR * 2.0 ** -24 * frame_norms(wave(name), DATA["window"])[:, None] * sums[None, :]
    mel = 10.0 ** ours.astype(np.float64)
    low = np.maximum(mel - err, math.sqrt(float(np.float32(1e-10))) * sums[None, :] * (1 - 1e-6))
    return np.log10(low) - LOGMEL_TOL, np.log10(mel + err) + LOGMEL_TOL


def _bin_of(values: np.ndarray) -> np.ndarray:
    """The processor's argmin in float32 (numpy's argmin, like torch's, takes the first)."""
    centers = DATA["bin_centers"]
    v = np.clip(values.astype(np.float32), np.float32(-7.0), np.float32(2.0))
    return np.argmin(np.abs(v[..., None] - centers), axis=-1).astype(np.int32)


def test_fixture_is_what_the_docstring_says():
    assert META["transformers"] == "5.24.0" and (META["hop"], META["n_fft"], META["window_size"]) == (800, 1600, 1600)
    assert FIXTURE.stat().st_size < 1_000_000
    assert len(CLIPS) == 16 and set(TONAL) <= set(CLIPS)


def test_filter_bank_is_transformers_bit_for_bit():
    from transformers.audio_utils import mel_filter_bank

    cases = [(801, 80, 0.0, 8000.0, 16000, "slaney", "slaney"), (201, 128, 0.0, 8000.0, 16000, "slaney", "slaney"),
             (257, 40, 20.0, 7600.0, 16000, None, "htk"), (513, 64, 0.0, 11025.0, 22050, "slaney", "kaldi"),
             (801, 80, 125.0, 7500.0, 16000, None, "slaney")]
    for bins, mels, fmin, fmax, sr, norm, scale in cases:
        ref = mel_filter_bank(bins, mels, fmin, fmax, sr, norm=norm, mel_scale=scale)
        ours = logmel.mel_filter_bank(bins, mels, fmin, fmax, sr, norm=norm, mel_scale=scale)
        assert ours.dtype == ref.dtype == np.float64 and np.array_equal(ours, ref), (bins, mels, scale)
    import hashlib

    assert hashlib.sha256(audio.mel_filters().tobytes()).hexdigest() == META["mel_filters_sha256"]


def test_bin_centers_and_linspace_are_torchs():
    assert np.array_equal(audio.bin_centers(), DATA["bin_centers"])
    for i, (a, b, n) in enumerate(DATA["linspace/args"]):
        assert np.array_equal(logmel.linspace_f32(float(a), float(b), int(n)), DATA[f"linspace/{i}"]), (a, b, n)


def test_window_is_torchs_but_for_its_cosines_ulp():
    """torch's cosine (MKL's VML) is an ulp (<= 2^-24 near 1) off a correctly rounded one at
    some points; ``0.5 - 0.5 cos`` keeps half of it, and nothing else differs."""
    ours, ref = logmel.hann_window(1600), DATA["window"]
    assert np.abs(ours - ref).max() <= 2.0 ** -24 and np.count_nonzero(ours != ref) <= 64  # 51 now


@pytest.mark.parametrize("name", CLIPS)
def test_frame_and_token_counts(name):
    n = len(wave(name))
    assert audio.frames_for(n) == audio.token_count(n) == int(DATA[f"mask/{name}"]) == len(DATA[f"logmel/{name}"])
    assert audio.log_mel(wave(name)).shape == audio.dmel(wave(name)).shape == (audio.frames_for(n), 80)


@pytest.mark.parametrize("name", CLIPS)
def test_log_mel_is_the_float64_arithmetic_rounded_once(name):
    assert np.array_equal(audio.log_mel(wave(name)), DATA[f"logmel64/{name}"])


@pytest.mark.parametrize("name", CLIPS)
def test_log_mel_against_the_float32_reference(name):
    ours, ref = audio.log_mel(wave(name)), DATA[f"logmel/{name}"]
    lo, hi = _reference_interval(name, ours)
    assert np.all((ref >= lo) & (ref <= hi)), f"{name}: outside the float32 FFT's error bound"
    if name not in TONAL:
        assert np.abs(ours - ref).max() <= LOGMEL_TOL


@pytest.mark.parametrize("name", CLIPS)
def test_dmel_bins(name):
    ours, ref = audio.dmel(wave(name)), DATA[f"dmel/{name}"]
    assert ours.dtype == np.int32 and ref.dtype == np.int32
    if name not in TONAL:
        assert np.array_equal(ours, ref)
        return
    # the reference's bin could be another only where its error interval crosses a boundary
    lo, hi = _reference_interval(name, audio.log_mel(wave(name)))
    certain = _bin_of(lo) == _bin_of(hi)
    differ = ours != ref
    assert not np.any(differ & certain), f"{name}: a bin differs where the reference's error cannot move it"
    assert np.all(np.abs(ours - ref) <= 1) and differ.mean() < 0.01


def test_batch_rows_are_the_clips_alone():
    """vLLM calls the extractor on a request's clips together and keeps ``ids[:n]``."""
    ids, mask = DATA["batch/dmel"], DATA["batch/mask"]
    assert DATA["batch/same_as_alone"].all()
    for i, name in enumerate(META["batch"]):
        n = audio.frames_for(len(wave(name)))
        assert mask[i].sum() == n and not mask[i, n:].any()
        assert np.array_equal(ids[i, :n], audio.dmel(wave(name)))


@pytest.mark.parametrize("name", CLIPS)
def test_fused_bins_are_the_quantized_log_mel(name):
    x = wave(name)
    lm = audio.log_mel(x)
    assert np.array_equal(audio.dmel(x), audio.dmel_bins(lm))
    assert np.array_equal(audio.dmel_bins(lm), _bin_of(lm))


def test_quantize_ties_clamps_and_nan():
    centers = DATA["bin_centers"]
    mids = ((centers[1:].astype(np.float64) + centers[:-1]) / 2).astype(np.float32)
    near = np.concatenate([np.nextafter(mids, np.float32(-np.inf)), mids, np.nextafter(mids, np.float32(np.inf))])
    special = np.array([-np.inf, -100, -7.0, 2.0, 100, np.inf, np.nan, 0.0, -0.0], np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate([near, centers, special, rng.uniform(-9, 4, 5000).astype(np.float32)])[None, :]
    got = audio.dmel_bins(x)
    want = _bin_of(x)
    assert np.array_equal(got, want)
    assert got[0, len(near) + len(centers) + 6] == 0  # NaN: torch's argmin takes it as the least: bin 0


def test_quantize_other_bin_counts():
    rng = np.random.default_rng(1)
    x = rng.uniform(-12, 5, (50, 80)).astype(np.float32)
    for n, lo, hi in ((256, -7.0, 2.0), (1, -7.0, 2.0), (2, -7.0, 2.0), (33, -8.5, 1.25)):
        cfg = audio.InklingAudioConfig(num_dmel_bins=n, dmel_min_value=lo, dmel_max_value=hi)
        c = audio.bin_centers(cfg)
        v = np.clip(x, np.float32(lo), np.float32(hi))
        want = np.argmin(np.abs(v[..., None] - c), axis=-1)
        assert np.array_equal(audio.dmel_bins(x, cfg), want), n
        clip = wave("five_s")[:16000]
        assert np.array_equal(audio.dmel(clip, cfg), audio.dmel_bins(audio.log_mel(clip, cfg), cfg)), n


def _numpy_log_mel(x: np.ndarray, cfg: audio.InklingAudioConfig) -> np.ndarray:
    """The pipeline in numpy float64 (after the float32 windowing), rounded once."""
    window = logmel.stft_window(logmel.hann_window(cfg.window_size), cfg.n_fft)
    t = audio.frames_for(len(x), cfg)
    left = max(cfg.n_fft - cfg.hop, 0)
    padded = np.zeros(left + t * cfg.hop + cfg.n_fft, np.float32)
    padded[left:left + len(x)] = x
    frames = np.lib.stride_tricks.sliding_window_view(padded, cfg.n_fft)[::cfg.hop][:t] * window
    spec = np.fft.rfft(frames.astype(np.float64), axis=1)
    floor = float(np.float32(1e-10))
    mag = np.sqrt(np.maximum(spec.real ** 2 + spec.imag ** 2, floor))
    mel = mag @ audio.mel_filters(cfg).astype(np.float64).T
    return np.log10(np.maximum(mel, floor)).astype(np.float32)


@pytest.mark.parametrize("hop,window,n_fft,mels", [
    (160, 400, 400, 80),  # 200 = 5 * 5 * 8
    (320, 640, 640, 64),  # 320 = 5 * 8 * 8
    (256, 1024, 1024, 128),  # 512 = 8 * 8 * 8
    (210, 420, 462, 40),  # 231 = 3 * 7 * 11: the generic radices; a window shorter than n_fft
    (480, 300, 300, 40),  # hop > n_fft: no left pad; 150 = 5 * 5 * 3 * 2
])
def test_other_geometries_match_numpy(hop, window, n_fft, mels):
    cfg = audio.InklingAudioConfig(feature_size=mels, hop=hop, window_size=window, n_fft=n_fft)
    x = wave("five_s")[:12345]
    ours, ref = audio.log_mel(x, cfg), _numpy_log_mel(x, cfg)
    assert ours.shape == ref.shape == (audio.frames_for(len(x), cfg), mels)
    assert np.all(np.abs(ours - ref) <= np.spacing(np.abs(ref)))  # float64 sums in another order: an ulp


def test_short_and_empty_clips():
    assert audio.log_mel(np.zeros(0, np.float32)).shape == (0, 80)
    assert audio.dmel(np.zeros(0, np.float32)).shape == (0, 80)
    one = audio.log_mel(np.array([0.5], np.float64))  # cast to float32, as the extractor casts it
    assert np.array_equal(one, audio.log_mel(np.array([0.5], np.float32)))
    with pytest.raises(ValueError):
        audio.log_mel(np.zeros((2, 100), np.float32))


def test_config_defaults_and_from_hf():
    d = audio.DEFAULT
    assert (d.feature_size, d.sampling_rate, d.hop, d.window_size, d.n_fft) == (80, 16000, 800, 1600, 1600)
    assert (d.num_dmel_bins, d.dmel_min_value, d.dmel_max_value) == (16, -7.0, 2.0)
    assert audio.InklingAudioConfig.from_hf({}, {}) == d
    cfg = audio.InklingAudioConfig.from_hf({"audio_token_duration_s": 0.02, "window_size_multiplier": 2.5},
                                           {"num_dmel_bins": 256})
    assert (cfg.hop, cfg.window_size, cfg.n_fft, cfg.num_dmel_bins) == (320, 800, 800, 256)
    with pytest.raises(hf_keys.ConfigError):
        audio.InklingAudioConfig.from_hf({"audio_token_duration_s": 0.00001234})
    with pytest.raises(hf_keys.ConfigError):
        audio.InklingAudioConfig(n_fft=1601, window_size=1601)
    with pytest.raises(hf_keys.ConfigError):
        audio.InklingAudioConfig(dmel_min_value=2.0, dmel_max_value=-7.0)
