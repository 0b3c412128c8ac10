"""Write tests/audio/fixtures/qwen3_asr_features.npz: what transformers 5.24's
``Qwen3ASRFeatureExtractor`` through ``Qwen3ASRProcessor._process_audio`` (torch, CPU) makes
of deterministic 16 kHz clips, for tests/audio/test_qwen3_asr.py (which runs without torch).

Run in a venv with torch and transformers 5.24.0 first on the path, e.g.:

    PYTHONPATH=/work/tf524 /work/vllm-venv/bin/python scripts/gen_qwen3_asr_fixtures.py

Clips (numpy only, seeded; the Inkling fixture script's generators): shorter than
``min_length`` (1, 201, 3000 and 7999 samples), 8000, 8001 and 8159 samples, 1 s of
Gaussian noise, silence, a 440 Hz tone, a two-tone mix, a chirp, uniform noise near full
scale, a very quiet clip, 2 s of speech-like sound and 5 s of speech, chords and noise
(16-bit PCM, stored as int16; the float32 clip is ``pcm / 32768``).

Per clip, the processor on the clip alone with its ``audio_kwargs`` (vLLM's way: one call
per clip, ``qwen3_asr.py`` ``_call_hf_processor``): ``feat/<name>`` float32 [128, T] (the
mask's frames), ``mask/<name>`` (its sum), ``pad/<name>`` (the mel axis length, a
multiple of 100), ``tokens/<name>`` (``num_audio_tokens``); ``feat64_sha256/<name>``, the sha256 of the same
arithmetic with the STFT, power and mel in float64 after the float32 windowing (a
correctly rounded Hann window), rounded to float32 before the max-8 floor and the
``(x + 4) / 4``: what the service computes (to ~1e-15) before its one rounding (a digest:
the service's bytes must equal it).
``trunc/*``: the 5 s clip with ``truncation=True, max_length=12345``. ``batch/*``: two
clips in one call (``padding=True``), to show that a batch changes the shorter clip.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.models.qwen3_asr import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_inkling_audio_fixtures import _pcm, _speechlike, as_float, rounded_hann, save  # noqa: E402

SR = 16_000
OUT = Path(__file__).resolve().parents[1] / "tests" / "audio" / "fixtures" / "qwen3_asr_features.npz"
KWARGS = dict(Qwen3ASRProcessor.audio_kwargs, return_tensors="pt")
BATCH = ("noise", "len_8001")
TRUNC = 12345


def clips() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20261206)
    t1 = np.arange(SR) / SR
    chirp_t = np.arange(2 * SR) / SR
    out: dict[str, np.ndarray] = {
        "noise": 0.1 * rng.standard_normal(SR),
        "silence": np.zeros(SR),
        "tone_440": 0.5 * np.sin(2.0 * np.pi * 440.0 * t1),
        "tones": 0.3 * np.sin(2.0 * np.pi * 3000.7 * t1) + 0.2 * np.sin(2.0 * np.pi * 257.0 * t1),
        "chirp": 0.5 * np.sin(2.0 * np.pi * (100.0 * chirp_t + (7900.0 - 100.0) / 4.0 * chirp_t ** 2)),
        "uniform_fs": rng.uniform(-0.999, 0.999, SR // 2),
        "quiet": 1e-5 * rng.standard_normal(SR // 2),
    }
    for n in (1, 201, 3000, 7999, 8000, 8001, 8159):
        out[f"len_{n}"] = 0.1 * rng.standard_normal(n)
    out = {k: v.astype(np.float32) for k, v in out.items()}
    out["speechlike"] = _pcm(_speechlike(2.0, rng))
    t5 = np.arange(5 * SR) / SR
    chord = sum(0.05 * np.sin(2.0 * np.pi * f * t5) for f in (261.63, 329.63, 392.0, 523.25))
    out["five_s"] = _pcm(_speechlike(5.0, rng) + chord + 0.01 * rng.standard_normal(5 * SR))
    return out


def processor() -> Qwen3ASRProcessor:
    """The processor's audio path (``_process_audio``) with the real extractor; no tokenizer."""
    proc = Qwen3ASRProcessor.__new__(Qwen3ASRProcessor)
    proc.feature_extractor = Qwen3ASRFeatureExtractor()
    proc.audio_token = "<|audio_pad|>"
    return proc


def float64_features(fe: Qwen3ASRFeatureExtractor, clip: np.ndarray) -> np.ndarray:
    """The extractor's arithmetic in float64 after the float32 windowing, rounded to float32
    before the floor and the scale (float32, as the extractor's)."""
    return centered_float64(fe, np.pad(clip, (0, max(fe.min_length - len(clip), 0))))


def centered_float64(fe, x: np.ndarray) -> np.ndarray:
    """The Whisper log-mel of ``x`` (as given, no padding) in float64 after the float32
    windowing, rounded to float32 before the max-8 floor and the ``(x + 4) / 4``."""
    wave = torch.nn.functional.pad(torch.from_numpy(x)[None], (fe.n_fft // 2, fe.n_fft // 2), mode="reflect")[0]
    frames = wave.unfold(-1, fe.n_fft, fe.hop_length)[:-1] * rounded_hann(fe.n_fft)
    spec = torch.fft.rfft(frames.double(), dim=-1)
    power = spec.real ** 2 + spec.imag ** 2
    filters = torch.from_numpy(fe.mel_filters).float().double()
    lm = (power @ filters).clamp_min(1e-10).log10().float().T
    lm = torch.maximum(lm, lm.max() - 8.0)
    return ((lm + 4.0) / 4.0).numpy()


def run(proc: Qwen3ASRProcessor, audio, **extra) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    out, reps = proc._process_audio(audio, **{**KWARGS, **extra})
    feats, mask = out["input_features"].numpy(), out["input_features_mask"].numpy()
    tokens = np.asarray(out["num_audio_tokens"], np.int64)
    assert all(len(r) == len(proc.audio_token) * int(n) for r, n in zip(reps, tokens))
    return feats, mask, tokens


def main() -> None:
    proc = processor()
    fe = proc.feature_extractor
    data: dict[str, np.ndarray] = {}
    inputs = clips()
    for name, clip in inputs.items():
        feats, mask, tokens = run(proc, [as_float(clip)])
        t = int(mask.sum())
        assert t == max(len(clip), fe.min_length) // fe.hop_length and feats.shape[-1] % 100 == 0, name
        assert not feats[0, :, t:].any() and mask[0, :t].all(), name
        data[f"wave/{name}"] = clip
        data[f"feat/{name}"] = feats[0, :, :t]
        data[f"mask/{name}"] = np.int64(t)
        data[f"pad/{name}"] = np.int64(feats.shape[-1])
        data[f"tokens/{name}"] = tokens[0]
        data[f"feat64_sha256/{name}"] = np.array(hashlib.sha256(float64_features(fe, as_float(clip)).tobytes()).hexdigest())
    feats, mask, tokens = run(proc, [as_float(inputs["five_s"])], truncation=True, max_length=TRUNC)
    data["trunc/feat"], data["trunc/mask"], data["trunc/tokens"] = feats[0, :, :int(mask.sum())], mask[0], tokens[0]
    feats, mask, tokens = run(proc, [as_float(inputs[n]) for n in BATCH])
    data["batch/feat"], data["batch/mask"], data["batch/tokens"] = feats, mask, tokens
    meta = {
        "transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
        "python": sys.version.split()[0], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(), "kwargs": {k: str(v) for k, v in KWARGS.items()},
        "batch": list(BATCH), "trunc": TRUNC,
    }
    save(OUT, data, meta, f"{len(inputs)} clips")


if __name__ == "__main__":
    main()
