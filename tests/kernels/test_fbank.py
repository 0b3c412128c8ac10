"""``kernels.fbank.log_fbank`` against the same steps written with numpy (float64 FFT,
float32 rounding where the kernel rounds): equal to within one float32 ulp, on noise and
tones at several window, hop and FFT sizes; the model-level check against transformers is
tests/audio/test_phi4_audio.py."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_mm_grpc.kernels import fbank


def numpy_fbank(wave, win, hop, n_fft, alpha, scale, window, filters):
    t = (len(wave) - win) // hop + 1
    frames = np.stack([wave[i * hop:i * hop + win] for i in range(t)])
    prev = np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    emph = (frames - np.float32(alpha) * prev) * np.float32(scale)
    spec = np.fft.rfft(emph.astype(np.float64) * window, n=n_fft, axis=1).astype(np.complex64)
    power = np.abs(spec) ** np.float32(2)
    mel = (power.astype(np.float64) @ filters.astype(np.float64)).astype(np.float32)
    return np.log(np.maximum(mel, np.float32(1.0)).astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("win,hop,n_fft", [(400, 160, 512), (256, 100, 256), (61, 33, 64), (3, 2, 4), (400, 160, 400)])
@pytest.mark.parametrize("kind", ["noise", "tone"])
def test_equals_the_numpy_steps_within_one_ulp(win, hop, n_fft, kind):
    rng = np.random.default_rng(win + hop)
    n = 21 * hop + win  # 22 frames: two groups of 8 and a partial one
    wave = (0.1 * rng.standard_normal(n) if kind == "noise" else
            0.5 * np.sin(2 * np.pi * 440.0 * np.arange(n) / 16000)).astype(np.float32)
    window = 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(win) / (win - 1))
    filters = np.abs(rng.standard_normal((n_fft // 2 + 1, 12))).astype(np.float32)
    filters[: n_fft // 8] = 0  # bands that start late
    out = np.empty(((n - win) // hop + 1, 12), np.float32)
    fbank.log_fbank(wave, fbank.plan(win, hop, n_fft, 0.97, 32768.0, window, filters), out)
    ref = numpy_fbank(wave, win, hop, n_fft, 0.97, 32768.0, window, filters)
    assert out.shape == ref.shape
    assert (np.abs(out - ref) <= np.maximum(np.spacing(np.abs(ref)), np.float32(5e-7))).all()


def test_plan_and_frames_are_checked():
    with pytest.raises(ValueError, match="even n_fft"):
        fbank.plan(400, 160, 399, 0.97, 32768.0, np.ones(400), np.ones((200, 3), np.float32))
    p = fbank.plan(400, 160, 512, 0.97, 32768.0, np.ones(400), np.ones((257, 3), np.float32))
    with pytest.raises(ValueError, match="need 560 samples"):
        fbank.log_fbank(np.zeros(559, np.float32), p, np.empty((2, 3), np.float32))
