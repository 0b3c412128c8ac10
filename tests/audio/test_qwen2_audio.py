"""Qwen2-Audio (``families/qwen/audio2.py``) against transformers 5.24.0's
``WhisperFeatureExtractor`` through ``Qwen2AudioProcessor._process_audio``.

The reference outputs are ``tests/audio/fixtures/qwen2_audio_features.npz``, written by
``scripts/gen_qwen2_audio_fixtures.py`` with transformers 5.24.0 and torch 2.14.0+cu130 (CPU,
AVX512) on the Qwen3-ASR fixture's 16 clips and 31 s of noise. These tests need no torch.

What is equal, and why not more: frames (``ceil(min(L, 480000) / 160)``), token counts and
the mask exactly; the features (every clip padded to 30 s, 3000 frames) bit for bit to the
same arithmetic in float64 after the float32 windowing, and within the Qwen3-ASR bounds of
torch's float32 (5e-6; 1e-4 on the tonal clips), for the same reason
(``test_qwen3_asr.py``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.core.carriers import AudioOptions
from sglang_mm_grpc.families import build_family
from sglang_mm_grpc.families.qwen import audio2, whisper_features

LONG = "noise_31s"  # the fixture script's 31 s of noise, made again here (not kept in the fixture)


def long_noise() -> np.ndarray:
    return (0.1 * np.random.default_rng(31).standard_normal(31 * 16000)).astype(np.float32)


FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATA = np.load(FIXTURES / "qwen2_audio_features.npz")
WAVES = np.load(FIXTURES / "qwen3_asr_features.npz")
META = json.loads(str(DATA["meta"]))
CLIPS = sorted(k[len("mask/"):] for k in DATA.files if k.startswith("mask/"))
TONAL = ("tone_440", "tones", "chirp")
FEAT_TOL, TONAL_TOL = 5e-6, 1e-4
MODEL = "Qwen/Qwen2-Audio-7B-Instruct"
FAMILY = Preprocessor.from_model(MODEL, cache_bytes=0).family


def wave(name: str) -> np.ndarray:
    if name == LONG:
        return long_noise()
    w = WAVES[f"wave/{name}"]
    return w.astype(np.float32) / np.float32(32768.0) if w.dtype == np.int16 else w


def test_fixture_and_preset():
    assert META["transformers"] == "5.24.0" and len(CLIPS) == 17 and LONG in CLIPS
    assert isinstance(FAMILY, audio2.Qwen2Audio) and FAMILY.modalities == ("audio",)
    assert (FAMILY.audio_token_id, FAMILY.config.n_samples, FAMILY.config.audio.feature_size) == (151646, 480000, 128)
    f = build_family({"processor_class": "Qwen2AudioProcessor", "chunk_length": 10}, {"audio_token_index": 9})
    assert isinstance(f, audio2.Qwen2Audio) and (f.audio_token_id, f.config.n_samples) == (9, 160000)


@pytest.mark.parametrize("name", CLIPS)
def test_frames_tokens_and_features(name):
    w = wave(name)
    target = FAMILY.audio_config()
    if int(DATA[f"tokens/{name}"]) <= 0:
        with pytest.raises(PreprocessError) as e:
            FAMILY.plan_audio(target, len(w), 0)
        assert e.value.code is Code.INVALID_ARGUMENT
        return
    plan = FAMILY.plan_audio(target, len(w), 0)
    assert plan.frames == int(DATA[f"mask/{name}"]) == -(-min(len(w), 480000) // 160)
    assert plan.token_count == int(DATA[f"tokens/{name}"])
    out = FAMILY.process_audio(target, w, plan)
    feats, mask = out["input_features"][0], out["feature_attention_mask"][0]
    assert str(mask.dtype) == str(DATA[f"mask_dtype/{name}"]) and int(mask.sum()) == plan.frames
    assert mask[:plan.frames].all() and feats.shape == (128, 3000)
    assert hashlib.sha256(feats.tobytes()).hexdigest() == str(DATA[f"feat64_sha256/{name}"])
    if f"feat/{name}" in DATA.files:
        assert np.abs(feats - DATA[f"feat/{name}"]).max() <= (TONAL_TOL if name in TONAL else FEAT_TOL)


@pytest.mark.parametrize("samples", [1, 399, 400, 401, 560, 16_000, 479_000, 480_000])
def test_the_silent_tail_is_the_whole_computation(samples):
    """Frames that read only the padding are copied from the first such frame, not
    computed: equal to computing every frame of the padded buffer (and its floor)."""
    cfg = FAMILY.config.audio
    w = (0.1 * np.random.default_rng(samples).standard_normal(samples)).astype(np.float32)
    padded = np.concatenate([w, np.zeros(480_000 - samples, np.float32)])  # every frame computed
    assert np.array_equal(whisper_features.features(w, cfg, 480_000), whisper_features.features(padded, cfg))


def test_clips_in_a_prompt_and_max_seconds():
    pp = Preprocessor.from_model(MODEL, cache_bytes=0)
    import audiogen

    clips = [audiogen.clip(seconds=1.1, rate=44100, channels=2, fmt="mp3", seed=4),
             audiogen.clip(seconds=0.3, rate=16000, channels=1, fmt="wav_s16", seed=5)]
    ids = [1, 151647, 151646, 151648, 13, 151647, 151646, 151648, 2]
    out = pp.preprocess([], ids, audios=clips)
    assert out.audio_tensors["input_features"].shape == (2, 128, 3000)
    assert [a.frames for a in out.audios] == [110, 30]
    assert [a.token_count for a in out.audios] == [audio2.token_count(110), audio2.token_count(30)]
    assert len(out.input_ids) == len(ids) - 2 + sum(a.token_count for a in out.audios)
    cut = pp.preprocess([], ids[:5] + [2], audios=clips[:1], audio_options=AudioOptions(max_seconds=0.5))
    assert cut.audios[0].frames == 50 and cut.audio_tensors["feature_attention_mask"].sum() == 50
