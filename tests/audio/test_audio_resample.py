"""Resampling (media.audio.resample, kernels/audio_resample) against torchaudio, as vLLM
0.33.0's default ``AudioResampler(method="torchaudio")`` runs it.

The fixtures (tests/audio/fixtures/decode.npz) come from scripts/gen_audio_fixtures.py
with vLLM 0.33.0, torch 2.14.0 (MKL 2024.2, AVX-512 capability) and torchaudio 2.11.0 on
an AMD EPYC host: torchaudio's outputs for hashed noise (``audiogen.noise``, rebuilt here
bit for bit) and for decoded clips, the sha256 of torchaudio's kernel for 156 rate pairs,
and its output lengths where float32 rounding departs from the exact ceiling.

The kernel is torchaudio's bit for bit. The convolution sums each output as MKL's sgemm
does there (kernels/audio_resample.py): the outputs are equal bit for bit wherever the conv
has 12 frames or more (the fused path) or fewer than 4 phases (48 -> 16, 32 -> 16, 24 -> 16,
16 -> 24, 8 -> 16 kHz), apart from one or two values in a conv's first frames; in the first
two or three frames of a conv of fewer than 12 frames, and in a one-frame conv, MKL sums some
other way. Measured over these fixtures: at most 5.96e-8 absolute (one float32 rounding),
4.3e-6 relative to the value (over values above 1e-3); in a wider run on this host (287
noise inputs, 35 rate pairs, 1 to 16000 frames) at most 1.2e-7 absolute. torch's own sums differ at that level on other CPUs (MKL picks its
kernels by CPU), so equality is for this host's fixtures, the bound for any.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

import audiogen
from sglang_mm_grpc.kernels import audio_resample
from sglang_mm_grpc.media import audio

FIXTURES = np.load(Path(__file__).resolve().parent / "fixtures" / "decode.npz")
META = json.loads(str(FIXTURES["meta"]))

#: Fixtures whose every value equals torchaudio's
EXACT = {"noise/44100_16000_8820", "noise/48000_16000_9600", "noise/22050_16000_1550", "noise/8000_16000_1600",
         "noise/32000_16000_6400", "real/mp3_1ch_22k_16000", "real/opus_2ch_48k_16000"}
ABS_BOUND = 6e-8
REL_BOUND = 5e-6


def _cases():
    for key in FIXTURES.files:
        if key.startswith("noise/"):
            orig, new, n = map(int, key.split("/")[1].split("_"))
            yield key, (orig, new, n)
        elif key.startswith("real/"):
            clip, new = key.split("/")[1].rsplit("_", 1)
            yield key, (META["clips"][clip]["torchcodec_rate"], int(new), clip)


CASES = dict(_cases())


def _input(case) -> np.ndarray:
    orig, new, what = case
    return audiogen.noise(what) if isinstance(what, int) else FIXTURES[f"{what}/torchcodec"]


@pytest.mark.parametrize("key", sorted(CASES))
def test_resample_equals_torchaudio(key):
    orig, new, _ = CASES[key]
    want = FIXTURES[key]
    got = audio.resample(_input(CASES[key]), orig, new)
    assert got.dtype == np.float32 and got.shape == want.shape
    if key in EXACT:
        assert np.array_equal(got, want)
    diff = np.abs(got.astype(np.float64) - want)
    assert diff.max() <= ABS_BOUND
    big = np.abs(want) > 1e-3
    assert (diff[big] / np.abs(want[big])).max() <= REL_BOUND


def test_fixture_inputs_are_the_scripts():
    """The noise is rebuilt exactly (integer arithmetic): torchaudio saw these bytes."""
    for n, digest in META["noise_sha256"].items():
        assert hashlib.sha256(audiogen.noise(int(n)).tobytes()).hexdigest() == digest
    assert len(CASES) >= 16 and EXACT <= set(CASES)


def test_kernel_equals_torchaudios():
    """``transforms.Resample(orig, new).kernel`` (float64, then float32) for every pair of
    13 common rates."""
    for pair, digest in META["kernels"].items():
        orig, new = map(int, pair.split("_"))
        kernel, width = audio_resample.sinc_kernel(orig, new)
        phases, taps, w = audio_resample.kernel_shape(orig, new)
        assert kernel.shape == (phases, taps) and width == w
        assert hashlib.sha256(kernel.tobytes()).hexdigest() == digest, pair


def test_lengths_are_torchaudios():
    """``ceil(new * n / orig)`` with the quotient in float32, as torch takes it: for long
    clips that is not always the exact ceiling (16 of these rows), and it is torch's."""
    rounded = 0
    for orig, new, n, want in META["lengths"]:
        assert audio.resampled_length(n, orig, new) == want
        g = math.gcd(orig, new)
        rounded += want != -(-(new // g) * n // (orig // g))
    assert rounded >= 10
    for key, (orig, new, _) in CASES.items():
        assert audio.resampled_length(len(_input(CASES[key])), orig, new) == len(FIXTURES[key])


def test_equal_rates_untouched():
    wave = audiogen.noise(1000)
    assert audio.resample(wave, 16000, 16000) is wave
    assert audio.resampled_length(1234, 16000, 16000) == 1234


def test_short_and_empty_inputs():
    for n in (0, 1, 2, 440, 441, 442):
        y = audio.resample(audiogen.noise(n), 44100, 16000)
        assert y.dtype == np.float32 and len(y) == audio.resampled_length(n, 44100, 16000)


def test_float64_input_is_taken_as_float32():
    """vLLM hands torchaudio ``torch.as_tensor(audio, dtype=float32)``."""
    x = audiogen.noise(4000).astype(np.float64) + 1e-12
    assert np.array_equal(audio.resample(x, 22050, 16000), audio.resample(x.astype(np.float32), 22050, 16000))


@pytest.mark.parametrize("orig,new", [(44100, 16000), (22050, 16000), (16000, 44100), (48000, 16000), (11025, 16000)])
@pytest.mark.parametrize("n", [5, 3000, 44100])
def test_zero_taps_skipped_change_no_value(orig, new, n):
    """Most taps of a many-phase kernel are zeros (93% at 44.1 -> 16 kHz): summing only the
    nonzero ones is equal bit for bit to summing them all, on the plain and fused paths."""
    x = audiogen.noise(n)
    kernel, width = audio_resample.sinc_kernel(orig, new)
    taps_by_phase = np.ascontiguousarray(kernel.T)
    assert np.array_equal(audio_resample.resample(x, orig, new, taps_by_phase, width),
                          audio_resample.resample(x, orig, new, taps_by_phase, width, whole=True))


def test_a_non_finite_sample_is_summed_as_torch_sums_it():
    """NaN times a zero tap is NaN: a clip with a non-finite sample is summed whole, so the
    NaN reaches every output whose window holds it, as in torch's conv."""
    x = audiogen.noise(44100)
    x[20000] = np.nan
    kernel, width = audio_resample.sinc_kernel(44100, 16000)
    taps_by_phase = np.ascontiguousarray(kernel.T)
    got = audio.resample(x, 44100, 16000)
    assert np.array_equal(got, audio_resample.resample(x, 44100, 16000, taps_by_phase, width, whole=True),
                          equal_nan=True)
    lo, hi = audio_resample.nonzero_spans(taps_by_phase)
    assert np.isnan(got).sum() > sum(hi - lo) // len(lo)  # more than the nonzero taps alone would reach
