"""Qwen3-Omni (``families/qwen/omni.py``): its audio features against transformers 5.24.0's
``WhisperFeatureExtractor`` through ``Qwen3OmniMoeProcessor._process_audio`` as vLLM 0.33
hands it a clip (zero-padded to a multiple of the hop first), its positions against the
thinker's ``get_rope_index``, its videos against ``Qwen3OmniMoeProcessor._process_videos``,
and prompts of images, a video and clips through the pipeline.

The reference outputs are ``tests/audio/fixtures/qwen3_omni_features.npz``, written by
``scripts/gen_qwen3_omni_fixtures.py`` with transformers 5.24.0 and torch 2.14.0+cu130 (CPU,
AVX512; vLLM's padding transcribed from vLLM 0.33.0) on the Qwen3-ASR fixture's 16 clips.
These tests need no torch.

What is equal, and why not more:

* Frames (``ceil(L / 160)``: vLLM's padding, where the processor alone counts
  ``L // 160``), token counts, the clip the extractor refuses, the positions: exactly.
* The features against the same arithmetic in float64 after the float32 windowing
  (``feat64_sha256``): bit for bit, every clip.
* The features against the float32 reference: within ``FEAT_TOL`` (measured 4.4e-6), and
  ``TONAL_TOL`` on the tonal clips (measured 5.7e-5), the Qwen3-ASR bounds and for the
  same reason (torch's float32 FFT and matmul round differently; ``test_qwen3_asr.py``).
"""

from __future__ import annotations

import hashlib
import io
import json
import wave as wav_io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.families import build_family, hf_keys
from sglang_mm_grpc.families.qwen import omni, whisper_features

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATA = np.load(FIXTURES / "qwen3_omni_features.npz")
WAVES = np.load(FIXTURES / "qwen3_asr_features.npz")
META = json.loads(str(DATA["meta"]))
CLIPS = sorted(k[len("feat/"):] for k in DATA.files if k.startswith("feat/"))
REFUSED = [str(n) for n in DATA["refused"]]
TONAL = ("tone_440", "tones", "chirp")
FEAT_TOL, TONAL_TOL = 5e-6, 1e-4
MODEL = "Qwen/Qwen3-Omni-30B-A3B-Instruct"


@pytest.fixture(scope="module")
def family() -> omni.Qwen3Omni:
    return Preprocessor.from_model(MODEL).family


def wave(name: str) -> np.ndarray:
    w = WAVES[f"wave/{name}"]
    return w.astype(np.float32) / np.float32(32768.0) if w.dtype == np.int16 else w


def test_fixture_is_what_the_docstring_says():
    assert META["transformers"] == "5.24.0" and META["kwargs"]["padding"] == "True"
    assert META["kwargs"]["truncation"] == "False" and META["vllm"].startswith("0.33.0")
    assert len(CLIPS) + len(REFUSED) == 16 and REFUSED == ["len_1"] and set(TONAL) <= set(CLIPS)


def test_the_preset_is_the_thinker_with_audio(family):
    c = family.config
    assert isinstance(family, omni.Qwen3Omni) and family.modalities == ("image", "video", "audio")
    assert (c.patch_size, c.merge_size, c.temporal_patch_size, c.image_mean, c.image_std) == (
        16, 2, 2, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert (c.image_token_id, c.audio_token_id, c.vision_start_token_id) == (151655, 151675, 151652)
    assert c.audio == whisper_features.LogMelConfig(128, 16000, 160, 400, 50, 0)
    assert family.device_normalization() is None  # vLLM's thinker normalizes on the CPU: float pixels


def test_config_from_a_thinkers_own_config_and_its_knobs():
    pre = {"processor_class": "Qwen3OmniMoeProcessor", "feature_size": 80, "hop_length": 200}
    f = build_family(pre, {"model_type": "qwen3_omni_moe_thinker", "audio_token_id": 7,
                           "audio_config": {"n_window": 25}})
    assert isinstance(f, omni.Qwen3Omni) and f.audio_token_id == 7
    assert (f.config.audio.feature_size, f.config.audio.hop_length, f.config.audio.n_window) == (80, 200, 25)
    with pytest.raises(hf_keys.ConfigError, match="dither"):
        build_family({**pre, "dither": 1e-5}, {"model_type": "qwen3_omni_moe"})
    with pytest.raises(hf_keys.ConfigError, match="audio token"):
        build_family(pre, {"model_type": "qwen3_omni_moe", "thinker_config": {"audio_token_id": 151655}})


@pytest.mark.parametrize("name", CLIPS)
def test_frames_and_tokens_are_vllms(family, name):
    n = len(wave(name))
    plan = family.plan_audio(family.audio_config(), n, 0)
    assert plan.frames == int(DATA[f"mask/{name}"]) == DATA[f"feat/{name}"].shape[1] == -(-n // 160)
    assert plan.token_count == int(DATA[f"tokens/{name}"]) and plan.samples == n
    assert int(DATA[f"unpadded/{name}"]) == n // 160  # the processor alone, without vLLM's padding


def test_a_clip_too_short_for_the_extractor_is_refused(family):
    for n in (len(wave(REFUSED[0])), 160, 0):
        with pytest.raises(PreprocessError) as e:
            family.plan_audio(family.audio_config(), n, 3)
        assert e.value.code is Code.INVALID_ARGUMENT and e.value.item == 3
    assert family.plan_audio(family.audio_config(), 161, 0).frames == 2


@pytest.mark.parametrize("name", CLIPS)
def test_features_are_the_float64_arithmetic_bit_for_bit(family, name):
    target = family.audio_config()
    w = wave(name)
    ours = family.process_audio(target, w, family.plan_audio(target, len(w), 0))["input_audio_features"]
    assert hashlib.sha256(ours.tobytes()).hexdigest() == str(DATA[f"feat64_sha256/{name}"])
    ref = DATA[f"feat/{name}"]
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= (TONAL_TOL if name in TONAL else FEAT_TOL)


def test_a_batch_changes_the_shorter_clips_last_frame_so_clips_go_alone(family):
    """vLLM's call on two new clips pads the shorter to the longer: the last frame of an
    8000-sample clip (no padding to the hop) reads zeros where alone it reads its reflection."""
    target = family.audio_config()
    alone = [family.process_audio(target, wave(n), family.plan_audio(target, len(wave(n)), 0)) for n in META["batch"]]
    ours = family.audio_batch(alone)
    ref, mask = DATA["batch/feat"], DATA["batch/mask"]
    assert np.array_equal(ours["feature_attention_mask"], mask) and ours["audio_feature_lengths"].tolist() == [100, 50]
    assert np.abs(ours["input_audio_features"][0] - ref[0]).max() <= FEAT_TOL
    short = ours["input_audio_features"][1, :, :50]
    assert np.abs(short[:, :49] - ref[1, :, :49]).max() <= FEAT_TOL and np.abs(short[:, 49] - ref[1, :, 49]).max() > 1e-3


def png(h: int, w: int, seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def wav(samples: int) -> bytes:
    buf = io.BytesIO()
    with wav_io.open(buf, "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(16000)
        f.writeframes((np.random.default_rng(5).standard_normal(samples) * 3000).astype("<i2").tobytes())
    return buf.getvalue()


def test_images_and_a_clip_in_one_prompt_have_the_thinkers_ids_and_positions():
    pp = Preprocessor.from_model(MODEL, cache_bytes=0)
    ids = [11, 12, 151652, 151655, 151653, 13, 151669, 151675, 151670, 14, 15, 151652, 151655, 151653, 16]
    out = pp.preprocess([png(128, 224, 0), png(64, 64, 1)], ids, audios=[wav(160 * 100 + 123)])
    assert np.array_equal(out.input_ids, DATA["rope/ids"])
    assert np.array_equal(out.positions, DATA["rope/positions"]) and out.rope_delta == int(DATA["rope/delta"][0])
    assert out.tensors["image_grid_thw"].tolist() == [[1, 8, 14], [1, 4, 4]]
    assert out.audio_tensors["input_audio_features"].shape == (1, 128, 101) and out.audios[0].token_count == 14
    assert out.audios[0].structural_range == (34, 14)


def test_a_video_is_the_thinkers():
    """``Qwen3OmniMoeProcessor._process_videos`` (its own size bounds, over the checkpoint's;
    every frame; 2.0 seconds per grid whatever the rate): pixels bit for bit, grid, tokens."""
    pytest.importorskip("av")
    pp = Preprocessor.from_model(MODEL, cache_bytes=0)
    out = pp.preprocess([], [1, 151652, 151656, 151653, 2], videos=[DATA["video/clip"].tobytes()])
    assert out.pixel_values_videos.shape == tuple(DATA["video/shape"])
    assert hashlib.sha256(out.pixel_values_videos.tobytes()).hexdigest() == str(DATA["video/pixel_values_videos_sha256"])
    assert np.array_equal(out.video_tensors["video_grid_thw"], DATA["video/video_grid_thw"])
    assert np.array_equal(out.video_tensors["second_per_grid_ts"], DATA["video/second_per_grid"])
    assert out.videos[0].token_count == int(DATA["video/tokens"])


def test_an_image_a_video_and_a_clip_in_one_prompt_have_the_thinkers_positions():
    pytest.importorskip("av")
    pp = Preprocessor.from_model(MODEL, cache_bytes=0)
    ids = [11, 151652, 151655, 151653, 12, 151652, 151656, 151653, 13, 151669, 151675, 151670, 14]
    out = pp.preprocess([png(128, 224, 0)], ids, videos=[DATA["video/clip"].tobytes()],
                        audios=[wav(160 * 100 + 123)])
    assert np.array_equal(out.input_ids, DATA["mixed/ids"])
    assert np.array_equal(out.positions, DATA["mixed/positions"]) and out.rope_delta == int(DATA["mixed/delta"][0])


def test_raw_pixels_are_refused(family):
    with pytest.raises(PreprocessError) as e:
        family.raw()
    assert e.value.code is Code.FAILED_PRECONDITION and "supports_mm_device_do_normalize" in e.value.detail


# -- Qwen2.5-Omni ------------------------------------------------------------------------

Q25 = "Qwen/Qwen2.5-Omni-7B"
Q25_CLIPS = sorted(k[len("q25/mask/"):] for k in DATA.files if k.startswith("q25/mask/"))


@pytest.fixture(scope="module")
def q25() -> omni.Qwen2_5Omni:
    return Preprocessor.from_model(Q25).family


def test_qwen2_5_omni_preset(q25):
    c = q25.config
    assert isinstance(q25, omni.Qwen2_5Omni) and q25.name == "qwen2_5_omni"
    assert (c.patch_size, c.audio_token_id, c.n_samples, c.image_mean[0]) == (14, 151646, 4_800_000, 0.48145466)
    assert (c.video.min_pixels, c.video.max_pixels, c.video.tokens_per_second, c.video.nominal_fps) == (
        128 * 28 * 28, 768 * 28 * 28, 25, 2.0)


@pytest.mark.parametrize("name", Q25_CLIPS)
def test_qwen2_5_omni_clips_are_the_processors(q25, name):
    """The extractor pads every clip to 300 s: the masked frames (``ceil(L / 160)``), their
    features (bit for bit the float64 arithmetic over the whole buffer, within the float32
    bounds), the token rule without chunks."""
    w, target = wave(name), q25.audio_config()
    if int(DATA[f"q25/tokens/{name}"]) == 0:  # vLLM refuses a clip that makes no token
        with pytest.raises(PreprocessError, match="no token"):
            q25.plan_audio(target, len(w), 0)
        return
    plan = q25.plan_audio(target, len(w), 0)
    assert plan.frames == int(DATA[f"q25/mask/{name}"]) == -(-len(w) // 160)
    assert plan.token_count == int(DATA[f"q25/tokens/{name}"])
    feats = q25.process_audio(target, w, plan)["input_audio_features"]
    assert hashlib.sha256(feats.tobytes()).hexdigest() == str(DATA[f"q25/feat64_sha256/{name}"])
    assert np.abs(feats - DATA[f"q25/feat/{name}"]).max() <= (TONAL_TOL if name in TONAL else FEAT_TOL)


def test_qwen2_5_omni_video_and_positions():
    pytest.importorskip("av")
    pp = Preprocessor.from_model(Q25, cache_bytes=0)
    clip = DATA["video/clip"].tobytes()
    out = pp.preprocess([], [1, 151652, 151656, 151653, 2], videos=[clip])
    assert hashlib.sha256(out.pixel_values_videos.tobytes()).hexdigest() == str(
        DATA["q25/video/pixel_values_videos_sha256"])
    assert np.array_equal(out.video_tensors["video_grid_thw"], DATA["q25/video/video_grid_thw"])
    assert np.array_equal(out.video_tensors["second_per_grid_ts"], DATA["q25/video/second_per_grid"])
    assert out.videos[0].token_count == int(DATA["q25/video/tokens"])
    ids = [11, 151652, 151655, 151653, 12, 151652, 151656, 151653, 13, 151647, 151646, 151648, 14]
    out = pp.preprocess([png(128, 224, 0)], ids, videos=[clip], audios=[wav(160 * 100 + 123)])
    assert out.tensors["image_grid_thw"].tolist() == [[1, 10, 16]]
    assert np.array_equal(out.input_ids, DATA["q25/mixed/ids"])
    assert np.array_equal(out.positions, DATA["q25/mixed/positions"])
    assert out.rope_delta == int(DATA["q25/mixed/delta"][0])
