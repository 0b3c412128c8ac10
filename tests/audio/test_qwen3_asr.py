"""Qwen3-ASR features (``families/qwen/asr.py`` on ``kernels/logmel.py``) against
transformers 5.24.0's ``Qwen3ASRFeatureExtractor`` through ``Qwen3ASRProcessor._process_audio``.

The reference outputs are ``tests/audio/fixtures/qwen3_asr_features.npz``, written by
``scripts/gen_qwen3_asr_fixtures.py`` with transformers 5.24.0 and torch 2.14.0+cu130
(CPU, AVX512 capability; numpy 2.3.5, Python 3.11): 16 deterministic clips (noise,
silence, a tone, two tones, a chirp, near-full-scale noise, a quiet clip, 1 / 201 / 3000 /
7999 / 8000 / 8001 / 8159 samples, 2 s speech-like, 5 s of speech, chords and noise), each
processed alone as vLLM processes a request's clips, one truncated clip and a two-clip batch.
These tests need no torch.

What is equal, and why not more:

* Frames (the mask's sum, ``max(L, 8000) // 160``), token counts, the mel filters: exactly.
* The features against the same arithmetic done by torch in float64 after torch's float32
  windowing (with our window), rounded to float32 before the max-8 floor and ``(x + 4) / 4``
  (``feat64_sha256``): bit for bit, every clip.
* The features against the float32 reference: within ``FEAT_TOL`` (5e-6; measured 4.4e-6)
  on every clip but the tonal ones, within ``TONAL_TOL`` (1e-4; measured 5.7e-5, in bands
  far below a pure tone's) on those: torch's float32 STFT (MKL's FFT), float32 matmul and
  log10 round differently, and cannot be matched bit for bit. Relative differences reach
  1.6e-3 only where a value is near 0 (a log-mel near -4). The features go to a bf16
  tower: rounded to bfloat16, 21 of 224000 values differ (measured), each by one bf16 ulp.
* A batch: the processor pads a batch to its longest clip, which changes a shorter clip's
  features (its reflection reads zeros, the floor covers padded frames) and can count it
  one frame more (``ceil`` instead of ``floor(L / 160)``); vLLM calls it on
  each clip alone (``qwen3_asr.py`` ``_call_hf_processor``), as the family does.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.families import build_family, hf_keys
from sglang_mm_grpc.families.qwen import asr

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "qwen3_asr_features.npz"
DATA = np.load(FIXTURE)
META = json.loads(str(DATA["meta"]))
CLIPS = sorted(k[len("wave/"):] for k in DATA.files if k.startswith("wave/"))
TONAL = ("tone_440", "tones", "chirp")
FEAT_TOL, TONAL_TOL = 5e-6, 1e-4
#: bfloat16 roundings that differ, of every clip's values together (measured: 21 of 224000).
BF16_DIFFS = 32
CFG = asr.Qwen3ASRAudioConfig()


def wave(name: str) -> np.ndarray:
    w = DATA[f"wave/{name}"]
    return w.astype(np.float32) / np.float32(32768.0) if w.dtype == np.int16 else w


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, ties to even (torch's rounding; finite values)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_fixture_is_what_the_docstring_says():
    assert META["transformers"] == "5.24.0" and META["kwargs"]["padding"] == "True"
    assert FIXTURE.stat().st_size < 1_500_000
    assert len(CLIPS) == 16 and set(TONAL) <= set(CLIPS)


def test_filter_bank_is_transformers_bit_for_bit():
    from transformers.audio_utils import mel_filter_bank

    ref = mel_filter_bank(201, 128, 0.0, 8000.0, 16000, norm="slaney", mel_scale="slaney")
    assert np.array_equal(asr.mel_filters(CFG), ref.T.astype(np.float32))


@pytest.mark.parametrize("name", CLIPS)
def test_frames_and_tokens(name):
    n = len(wave(name))
    t = asr.frames_for(n, CFG)
    assert t == int(DATA[f"mask/{name}"]) == DATA[f"feat/{name}"].shape[1]
    assert int(DATA[f"pad/{name}"]) == -(-t // 100) * 100
    assert asr.token_count(t) == int(DATA[f"tokens/{name}"])


def test_token_count_is_vllms_formula():
    """``_get_feat_extract_output_lengths`` (vLLM) / ``_get_audio_token_length`` (HF) on
    every length to 30 000 frames (numpy floor division, as torch's)."""
    t = np.arange(1, 30_001)
    leave = t % 100
    feat = (leave - 1) // 2 + 1
    want = ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (t // 100) * 13
    assert [asr.token_count(int(x)) for x in t] == want.tolist()
    assert asr.token_count(100) == 13 and asr.token_count(50) == 7 and asr.token_count(1) == 1


@pytest.mark.parametrize("name", CLIPS)
def test_features_are_the_float64_arithmetic_bit_for_bit(name):
    ours = asr.features(wave(name), CFG)
    assert hashlib.sha256(ours.tobytes()).hexdigest() == str(DATA[f"feat64_sha256/{name}"])


@pytest.mark.parametrize("name", CLIPS)
def test_features_within_the_float32_reference(name):
    ours, ref = asr.features(wave(name), CFG), DATA[f"feat/{name}"]
    assert ours.dtype == np.float32 and ours.shape == ref.shape == (128, int(DATA[f"mask/{name}"]))
    tol = TONAL_TOL if name in TONAL else FEAT_TOL
    assert np.abs(ours - ref).max() <= tol
    if name == "silence":
        assert np.array_equal(ours, ref) and (ours == -1.5).all()


def test_bfloat16_roundings_differ_rarely_by_one_ulp():
    diffs = 0
    for name in CLIPS:
        a, b = bf16_bits(asr.features(wave(name), CFG)), bf16_bits(DATA[f"feat/{name}"])
        differ = a != b
        diffs += int(differ.sum())
        # same sign: one step of the bit pattern is one bf16 ulp
        assert (np.abs(a[differ].astype(np.int32) - b[differ].astype(np.int32)) == 1).all(), name
    assert 0 < diffs <= BF16_DIFFS


def test_truncation_cuts_after_the_min_length_padding():
    family = asr.Qwen3ASR(asr.Qwen3ASRConfig())
    target = asr.ExtractorCall(CFG, int(META["trunc"]))
    w = wave("five_s")
    plan = family.plan_audio(target, len(w), 0)
    assert plan.frames == int(DATA["trunc/mask"].sum()) == DATA["trunc/feat"].shape[1]
    assert plan.token_count == int(DATA["trunc/tokens"]) and plan.samples == META["trunc"]
    out = family.process_audio(target, w, plan)["input_audio_features"]
    assert np.abs(out - DATA["trunc/feat"]).max() <= FEAT_TOL
    short = family.plan_audio(asr.ExtractorCall(CFG, 4000), 1000, 0)  # padded to 8000, cut to 4000
    assert (short.samples, short.frames) == (1000, 25)


def test_a_batch_changes_the_shorter_clip_so_clips_go_alone():
    """Batched with a longer clip, an 8001-sample clip's mask counts ``ceil(8001 / 160)`` = 51
    frames (the ``[::160]`` rescale drops no last frame when the padded length is a multiple
    of 160), one more than alone, and its last frame reads zeros where alone it reads the
    reflection."""
    feats, mask = DATA["batch/feat"], DATA["batch/mask"]
    longest, shorter = (int(DATA[f"mask/{n}"]) for n in META["batch"])
    assert META["batch"] == ["noise", "len_8001"] and mask.sum(1).tolist() == [longest, shorter + 1]
    assert np.array_equal(feats[0, :, :longest], DATA[f"feat/{META['batch'][0]}"])
    assert not np.array_equal(feats[1, :, :shorter], DATA[f"feat/{META['batch'][1]}"])


def test_the_batch_is_the_gateways_padded_layout():
    family = asr.Qwen3ASR(asr.Qwen3ASRConfig())
    target = family.audio_config()
    clips = []
    for name in META["batch"]:
        plan = family.plan_audio(target, len(wave(name)), 0)
        clips.append(family.process_audio(target, wave(name), plan))
    out = family.audio_batch(clips)
    assert out["input_audio_features"].shape == (2, 128, 100) and out["input_audio_features"].dtype == np.float32
    assert out["audio_feature_lengths"].tolist() == [100, 50] and out["audio_feature_lengths"].dtype == np.int64
    assert out["feature_attention_mask"].dtype == np.int64 and out["feature_attention_mask"].sum(1).tolist() == [100, 50]
    for i, name in enumerate(META["batch"]):
        n = int(out["audio_feature_lengths"][i])
        assert np.array_equal(out["input_audio_features"][i, :, :n], asr.features(wave(name), CFG))
    assert not out["input_audio_features"][1, :, 50:].any()
    layout = family.audio_field_layout
    assert set(layout.batched) == set(out) and layout.encoder_input_key == "input_audio_features"
    assert set(layout.keep_on_cpu) == {"feature_attention_mask", "audio_feature_lengths"}


def test_the_preset_is_audio_only():
    pp = Preprocessor.from_model("Qwen/Qwen3-ASR-1.7B-hf", cache_bytes=0)
    f = pp.family
    assert isinstance(f, asr.Qwen3ASR) and f.modalities == ("audio",) and f.audio_token_id == 151676
    assert f.image_token_id != f.audio_token_id and f.config.audio == CFG
    assert pp.info["modalities"] == ["audio"] and pp.info["audio_token_id"] == 151676
    with pytest.raises(PreprocessError, match="takes no images") as e:
        pp.check_request(1, [151655, 151676], audios=1)
    assert e.value.code is Code.FAILED_PRECONDITION
    with pytest.raises(PreprocessError, match="takes no video") as e:
        pp.check_request(0, None, videos=1)
    assert e.value.code is Code.FAILED_PRECONDITION
    prompt = pp.check_request(0, [1, 151655, 151676, 2], audios=1)  # an image token is ordinary text here
    assert len(prompt.placeholders) == 0 and prompt.audio_placeholders.tolist() == [2]


def test_config_from_hf():
    vllm_style = {"model_type": "qwen3_asr", "thinker_config": {"audio_token_id": 151700}}
    f = build_family({"feature_extractor_type": "Qwen3ASRFeatureExtractor", "n_window": 25}, vllm_style)
    assert isinstance(f, asr.Qwen3ASR) and f.audio_token_id == 151700 and f.config.audio.n_window == 25
    from_processor = build_family({}, {"model_type": "qwen3_asr"},
                                  {"feature_extractor": {"feature_extractor_type": "Qwen3ASRFeatureExtractor",
                                                         "min_length": 0}})
    assert from_processor.config.audio.min_length == 0
    with pytest.raises(hf_keys.ConfigError, match="dither"):
        build_family({"feature_extractor_type": "Qwen3ASRFeatureExtractor", "dither": 0.1}, {"model_type": "qwen3_asr"})


def test_too_few_samples_are_refused():
    family = asr.Qwen3ASR(asr.Qwen3ASRConfig())
    with pytest.raises(PreprocessError, match="no feature frame") as e:
        family.plan_audio(asr.ExtractorCall(CFG, 100), 5000, 2)
    assert e.value.code is Code.INVALID_ARGUMENT and e.value.item == 2


@pytest.mark.parametrize("n_fft,hop,mels", [(400, 160, 128), (512, 128, 64), (320, 100, 40)])
def test_centered_power_frames_are_numpys_float64(n_fft, hop, mels):
    """``log_mel_centered`` on other geometries: numpy's float64 rfft of the reflect-padded,
    float32-windowed frames, ``|X|^2``, the float32 filters, log10, rounded once."""
    from sglang_mm_grpc.kernels import logmel

    rng = np.random.default_rng(n_fft)
    x = (0.1 * rng.standard_normal(3 * n_fft + 37)).astype(np.float32)
    window = logmel.hann_window(n_fft)
    filters = logmel.mel_filter_bank(n_fft // 2 + 1, mels, 0.0, 8000.0, 16000, norm="slaney", mel_scale="slaney")
    fb = np.ascontiguousarray(filters.T, np.float32)
    p = logmel.plan(n_fft, hop, window, fb, 0.0, 1e-10, power=2, center=True)
    ours = logmel.log_mel_centered(x, p)
    padded = np.pad(x, n_fft // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop][:-1] * window
    spec = np.fft.rfft(frames.astype(np.float64), axis=1)
    power = spec.real ** 2 + spec.imag ** 2
    want = np.log10(np.maximum(power @ fb.T.astype(np.float64), float(np.float32(1e-10)))).astype(np.float32)
    assert ours.shape == want.shape == (len(x) // hop, mels)
    assert np.abs(ours.astype(np.float64) - want).max() <= 2 * np.spacing(np.abs(want)).max()
    with pytest.raises(ValueError, match="center=True"):
        logmel.log_mel_centered(x, logmel.plan(n_fft, hop, window, fb, power=2))
    with pytest.raises(ValueError, match="more than"):
        logmel.log_mel_centered(x[: n_fft // 2], p)
