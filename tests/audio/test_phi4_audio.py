"""Phi-4-multimodal audio (``families/phi4mm_audio.py``, in the ``phi4mm`` family) against
transformers 5.24.0's ``Phi4MultimodalFeatureExtractor``.

The reference outputs are ``tests/audio/fixtures/phi4_audio_features.npz``, written by
``scripts/gen_phi4_audio_fixtures.py`` with transformers 5.24.0 and torch 2.14.0+cu130 (CPU,
AVX512) on the Qwen3-ASR fixture's 16 clips, each alone. These tests need no torch.

What is equal, and why not more: the mel filters bit for bit; frames and
``audio_embed_sizes`` exactly; the clips too short for a frame refused. The features are the
same operations in the same precisions (float32 pre-emphasis, float64 window and FFT,
complex64 spectrum, float32 power, matmul and log), but torch's float32 matmul sums in
another order and its log rounds its own way: measured at most one float32 ulp apart
(1.9e-6 at values of 16 to 32; 4.8e-7 near 0) on every clip, tones included, 5% of values
differing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.families import phi4mm_audio

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATA = np.load(FIXTURES / "phi4_audio_features.npz")
WAVES = np.load(FIXTURES / "qwen3_asr_features.npz")
META = json.loads(str(DATA["meta"]))
CLIPS = sorted(k[len("feat/"):] for k in DATA.files if k.startswith("feat/"))
REFUSED = [str(n) for n in DATA["refused"]]
MODEL = "microsoft/Phi-4-multimodal-instruct"
FAMILY = Preprocessor.from_model(MODEL, cache_bytes=0).family
CFG = FAMILY.config.audio


def wave(name: str) -> np.ndarray:
    w = WAVES[f"wave/{name}"]
    return w.astype(np.float32) / np.float32(32768.0) if w.dtype == np.int16 else w


def within_one_ulp(a: np.ndarray, b: np.ndarray) -> bool:
    """|a - b| at most one float32 ulp of ``b`` (or 5e-7 near 0, where the log of a mel
    just above its clamp at 1.0 is tiny)."""
    return bool((np.abs(a - b) <= np.maximum(np.spacing(np.abs(b)), np.float32(5e-7))).all())


def test_fixture_and_filters():
    assert META["transformers"] == "5.24.0" and len(CLIPS) + len(REFUSED) == 16
    assert REFUSED == ["len_1", "len_201"]
    assert np.array_equal(phi4mm_audio.mel_filters(CFG).T, DATA["mel_filters"])
    assert (FAMILY.audio_token_id, CFG.n_fft, CFG.win_length) == (200011, 512, 400)


@pytest.mark.parametrize("name", CLIPS)
def test_features_within_one_ulp_and_counts_exact(name):
    w = wave(name)
    plan = FAMILY.plan_audio(FAMILY.audio_config(), len(w), 0)
    ref = DATA[f"feat/{name}"]
    assert plan.frames == ref.shape[0] == (len(w) - 400) // 160 + 1
    assert plan.token_count == int(DATA[f"sizes/{name}"])
    ours = FAMILY.process_audio(FAMILY.audio_config(), w, plan)["audio_input_features"][0]
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert within_one_ulp(ours, ref)
    if name == "silence":
        assert np.array_equal(ours, ref)


@pytest.mark.parametrize("name", REFUSED)
def test_a_clip_without_a_frame_is_refused(name):
    with pytest.raises(PreprocessError) as e:
        FAMILY.plan_audio(FAMILY.audio_config(), len(wave(name)), 2)
    assert e.value.code is Code.INVALID_ARGUMENT and e.value.item == 2


def test_a_prompt_of_an_image_and_two_clips():
    import audiogen
    import imagegen

    pp = Preprocessor.from_model(MODEL, cache_bytes=0)
    clips = [audiogen.clip(seconds=1.1, rate=44100, channels=2, fmt="mp3", seed=4),
             audiogen.clip(seconds=0.3, rate=16000, channels=1, fmt="wav_s16", seed=5)]
    out = pp.preprocess([imagegen.png(70, 90, seed=6)], [1, 200010, 13, 200011, 13, 200011, 2], audios=clips)
    t = out.audio_tensors
    frames = [(a.samples - 400) // 160 + 1 for a in out.audios]
    assert t["audio_input_features"].shape == (2, max(frames), 80) and frames == [a.frames for a in out.audios]
    assert t["audio_embed_sizes"].tolist() == [phi4mm_audio.embed_size(f, CFG) for f in frames]
    assert t["audio_attention_mask"].dtype == np.bool_ and t["audio_attention_mask"].sum(1).tolist() == frames
    assert not t["audio_input_features"][1, frames[1]:].any()
    assert (np.asarray(out.input_ids) == 200011).sum() == sum(t["audio_embed_sizes"])
    one = pp.preprocess([], [1, 200011, 2], audios=clips[:1]).audio_tensors
    assert "audio_attention_mask" not in one  # the extractor returns it for a batch only
