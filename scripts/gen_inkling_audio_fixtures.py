"""Write tests/audio/fixtures/inkling_features.npz: what transformers 5.24's
``InklingFeatureExtractor`` + ``InklingProcessor._extract_dmel_bins`` (torch, CPU) make of
deterministic 16 kHz clips, for tests/audio/test_inkling_audio.py (which runs without torch).

Run in a venv with torch and transformers 5.24.0 first on the path, e.g.:

    /work/vllm-venv/bin/pip install --no-deps --target /work/tf524 transformers==5.24.0
    PYTHONPATH=/work/tf524 /work/vllm-venv/bin/python scripts/gen_inkling_audio_fixtures.py

Clips (numpy only, seeded): tones (440 Hz; 1 kHz at 0.999 of full scale; a two-tone mix),
a linear chirp 100 Hz -> 7.9 kHz, Gaussian noise, uniform noise near full scale, silence,
a very quiet clip (float32 noise at 1e-5) and one of a few 16-bit steps, a speech-like clip
(a 120 Hz pulse train through three formant resonators, noise at -60 dB, 16-bit PCM), clips
of 1, 799, 800, 801 and 8000 samples, and 5 s of speech-like sound, chords and noise
(16-bit PCM). 16-bit clips are stored as int16 (the float32 clip is ``pcm / 32768``).

Per clip: the extractor on the clip alone (``fe(clip, sampling_rate=16000,
return_tensors="pt")``): ``logmel/<name>`` float32 [T, 80] and ``mask/<name>`` (the
``input_features_mask`` row's sum); the processor's bins ``dmel/<name>`` int32 [T, 80];
``logmel64/<name>``, the same arithmetic in float64 after the float32 windowing (with a
correctly rounded Hann window), rounded to float32 (``float64_log_mel``).
``batch/*``: one call on two clips of different lengths (vLLM's way: a request's clips in
one call, then ``ids[:n]``), its bins and mask, and whether each row equals the clip alone.
Also the extractor's window and a sha256 of its float32 mel filters, the processor's
bin centers, ``torch.linspace(..., float64).to(float32)`` for other bin counts, and the
versions. The script checks HF's own invariants (mask sums, batch rows) as it goes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import torch
import transformers
from transformers import InklingFeatureExtractor, InklingProcessor
from transformers.processing_utils import ProcessorMixin

SR = 16_000
OUT = Path(__file__).resolve().parents[1] / "tests" / "audio" / "fixtures" / "inkling_features.npz"
BATCH = ("speechlike", "five_s")
#: (start, end, steps) of other bin-center grids checked against torch.linspace.
LINSPACES = ((-7.0, 2.0, 16), (-7.0, 2.0, 256), (-7.0, 2.0, 17), (-10.0, 3.0, 100), (-8.5, 1.25, 33))


def _pcm(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)


def _resonate(x: np.ndarray, freq: float, bw: float) -> np.ndarray:
    r = np.exp(-np.pi * bw / SR)
    a1, a2 = -2.0 * r * np.cos(2.0 * np.pi * freq / SR), r * r
    y = np.zeros_like(x)
    for n in range(len(x)):
        y[n] = x[n] - a1 * (y[n - 1] if n > 0 else 0.0) - a2 * (y[n - 2] if n > 1 else 0.0)
    return y


def _speechlike(seconds: float, rng: np.random.Generator) -> np.ndarray:
    n = int(seconds * SR)
    t = np.arange(n) / SR
    f0 = 120.0 + 15.0 * np.sin(2.0 * np.pi * 3.0 * t)
    phase = np.cumsum(f0 / SR)
    pulses = (np.diff(np.floor(phase), prepend=0.0) > 0).astype(np.float64)
    voiced = sum(_resonate(pulses, f, bw) for f, bw in ((700.0, 80.0), (1220.0, 90.0), (2600.0, 120.0)))
    envelope = 0.5 + 0.5 * np.sin(2.0 * np.pi * 2.0 * t) ** 2
    x = voiced * envelope
    x = 0.3 * x / np.abs(x).max()
    return x + 1e-3 * rng.standard_normal(n)


def clips() -> dict[str, np.ndarray]:
    """name -> int16 PCM or float32 clip."""
    rng = np.random.default_rng(20240611)
    t1 = np.arange(SR) / SR
    chirp_t = np.arange(2 * SR) / SR
    out: dict[str, np.ndarray] = {
        "tone_440": 0.5 * np.sin(2.0 * np.pi * 440.0 * t1),
        "tone_fs": 0.999 * np.sin(2.0 * np.pi * 1000.0 * t1[: SR // 2]),
        "tones": 0.3 * np.sin(2.0 * np.pi * 3000.7 * t1) + 0.2 * np.sin(2.0 * np.pi * 257.0 * t1),
        "chirp": 0.5 * np.sin(2.0 * np.pi * (100.0 * chirp_t + (7900.0 - 100.0) / 4.0 * chirp_t ** 2)),
        "noise": 0.1 * rng.standard_normal(SR),
        "uniform_fs": rng.uniform(-0.999, 0.999, SR // 2),
        "silence": np.zeros(SR),
        "quiet": 1e-5 * rng.standard_normal(SR // 2),
    }
    out = {k: v.astype(np.float32) for k, v in out.items()}
    out["pcm_quiet"] = rng.integers(-3, 4, SR // 2).astype(np.int16)
    out["speechlike"] = _pcm(_speechlike(2.0, rng))
    for n in (1, 799, 800, 801, 8000):
        out[f"len_{n}"] = (0.1 * rng.standard_normal(n)).astype(np.float32)
    t5 = np.arange(5 * SR) / SR
    chord = sum(0.05 * np.sin(2.0 * np.pi * f * t5) for f in (261.63, 329.63, 392.0, 523.25))
    out["five_s"] = _pcm(_speechlike(5.0, rng) + chord + 0.01 * rng.standard_normal(5 * SR))
    return out


def as_float(clip: np.ndarray) -> np.ndarray:
    return clip.astype(np.float32) / np.float32(32768.0) if clip.dtype == np.int16 else clip


class _Tokenizer:
    def encode(self, text, add_special_tokens=False):
        return [0]


def processor() -> InklingProcessor:
    """The processor with its real ``__init__`` (bin centers included), minus the
    tokenizer and the mixin's bookkeeping, which the bins do not use."""
    with mock.patch.object(ProcessorMixin, "__init__", lambda *a, **k: None):
        return InklingProcessor(tokenizer=_Tokenizer())


def save(out: Path, data: dict, meta: dict, summary: str) -> None:
    """``data``, with ``meta`` as JSON, to ``out`` (the fixture scripts' one way of writing)."""
    data["meta"] = np.array(json.dumps(meta))
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **data)
    print(f"{out}: {out.stat().st_size} bytes, {summary}, {meta}")


def rounded_hann(n: int) -> torch.Tensor:
    """``torch.hann_window(n)``'s arithmetic with a correctly rounded cosine (torch's comes
    from MKL's VML on x86 and is an ulp off at some points): the service's window."""
    ang = np.arange(n, dtype=np.float32) * np.float32(2.0 * np.pi / n)
    cos = np.cos(ang.astype(np.float64)).astype(np.float32)
    return torch.from_numpy(cos * np.float32(-0.5) + np.float32(0.5))


def float64_log_mel(fe: InklingFeatureExtractor, clip: np.ndarray) -> np.ndarray:
    """The extractor's arithmetic in float64 after its float32 windowing (``torch.stft``
    rounds ``frame * window`` to float32; then an FFT, the magnitude, the mel filters and
    log10 in float64), with ``rounded_hann``, rounded to float32 once: the value the
    service computes (to ~1e-15) before its one rounding."""
    x = torch.from_numpy(clip)
    right = -(-len(clip) // fe.hop_length) * fe.hop_length - len(clip)
    wave = torch.nn.functional.pad(x, (fe.n_fft - fe.hop_length, right))
    frames = wave.unfold(-1, fe.n_fft, fe.hop_length) * rounded_hann(fe.window_size)
    spec = torch.fft.rfft(frames.double(), dim=-1)
    floor = float(np.float32(1e-10))
    mag = (spec.real ** 2 + spec.imag ** 2).clamp_min(floor).sqrt()
    return (mag @ fe.mel_filters.double().T).clamp_min(floor).log10().float().numpy()


def main() -> None:
    fe, proc = InklingFeatureExtractor(), processor()
    data: dict[str, np.ndarray] = {}
    inputs = clips()
    for name, clip in inputs.items():
        feats = fe(as_float(clip), sampling_rate=SR, return_tensors="pt")
        lm, mask = feats["input_features"][0], feats["input_features_mask"][0]
        assert int(mask.sum()) == lm.shape[0] == -(-len(clip) // fe.hop_length), name
        data[f"wave/{name}"] = clip
        data[f"logmel/{name}"] = lm.numpy()
        data[f"mask/{name}"] = np.int64(mask.sum())
        data[f"dmel/{name}"] = proc._extract_dmel_bins(feats["input_features"])[0].numpy()
        data[f"logmel64/{name}"] = float64_log_mel(fe, as_float(clip))
    feats = fe([as_float(inputs[n]) for n in BATCH], sampling_rate=SR, return_tensors="pt")
    ids = proc._extract_dmel_bins(feats["input_features"]).numpy()
    data["batch/dmel"] = ids
    data["batch/mask"] = feats["input_features_mask"].numpy()
    same = [bool(np.array_equal(ids[i, : data[f"mask/{n}"]], data[f"dmel/{n}"])) for i, n in enumerate(BATCH)]
    data["batch/same_as_alone"] = np.array(same)
    data["window"] = fe.window.numpy()
    data["bin_centers"] = proc.bin_centers.numpy()
    data["linspace/args"] = np.array(LINSPACES, np.float64)
    for i, (a, b, n) in enumerate(LINSPACES):
        data[f"linspace/{i}"] = torch.linspace(a, b, int(n), dtype=torch.float64).to(torch.float32).numpy()
    meta = {
        "transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
        "python": sys.version.split()[0], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl": torch.backends.mkl.is_available(), "torch_threads": torch.get_num_threads(),
        "mel_filters_sha256": hashlib.sha256(fe.mel_filters.numpy().tobytes()).hexdigest(),
        "hop": fe.hop_length, "n_fft": fe.n_fft, "window_size": fe.window_size, "batch": list(BATCH),
    }
    save(OUT, data, meta, f"{len(inputs)} clips, batch rows alone-equal {same}")


if __name__ == "__main__":
    main()
