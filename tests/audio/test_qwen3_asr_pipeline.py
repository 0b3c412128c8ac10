"""Audio clips through ``Preprocessor.preprocess`` and ``plan`` (Qwen3-ASR, audio only): the
clip decoded, mixed to mono and resampled (``media.audio``), its log-mel
(``families.qwen.asr``, checked against transformers in test_qwen3_asr.py), the placeholder
``<|audio_pad|>`` expanded to ``13 * (T // 100) + ...`` tokens, the markers around it left as
they are; the gateway's batched layout; images and videos refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

import audiogen
import imagegen
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.core.carriers import AudioOptions
from sglang_mm_grpc.families.qwen import asr
from sglang_mm_grpc.media import audio as media_audio

pytest.importorskip("av")

MODEL = "Qwen/Qwen3-ASR-1.7B-hf"
AUDIO = 151676  # <|audio_pad|>
START, END = 151669, 151670  # stand-ins for <|audio_start|> / <|audio_end|>: ordinary tokens here


@pytest.fixture(scope="module")
def pp():
    return Preprocessor.from_model(MODEL, cache_bytes=0)


def _features(clip: bytes) -> np.ndarray:
    meta = media_audio.probe(clip)
    wave = media_audio.resample(media_audio.decode(clip, meta), meta.sample_rate, 16000)
    return asr.features(wave, asr.Qwen3ASRAudioConfig())


def test_a_clip_is_expanded_and_featurized(pp):
    clip = audiogen.clip(seconds=1.3, rate=44100, channels=2, fmt="wav_s16")
    ids = [1, 7, START, AUDIO, END, 8, 2]
    out = pp.preprocess([], ids, audios=[clip])
    (a,) = out.audios
    samples = math.ceil(1.3 * 44100 * 16000 / 44100)
    frames = samples // 160
    tokens = asr.token_count(frames)
    assert (a.samples, a.frames, a.token_count, tokens) == (samples, frames, tokens, 13 + 4)
    assert a.structural_range == (3, tokens) and a.patch_ranges == ((3, tokens),)
    want = np.array([1, 7, START] + [AUDIO] * tokens + [END, 8, 2])
    assert np.array_equal(out.input_ids, want) and out.audio_token_id == AUDIO
    t = out.audio_tensors
    assert set(t) == {"input_audio_features", "feature_attention_mask", "audio_feature_lengths"}
    assert t["input_audio_features"].shape == (1, 128, frames) and t["input_audio_features"].dtype == np.float32
    assert np.array_equal(t["input_audio_features"][0], _features(clip))
    assert t["audio_feature_lengths"].tolist() == [frames] and t["feature_attention_mask"].tolist() == [[1] * frames]
    assert out.images == [] and len(out.input_ids) == len(ids) - 1 + tokens


def test_clips_are_padded_to_the_longest(pp):
    clips = [audiogen.clip(seconds=s, rate=16000, channels=1, fmt="flac", seed=int(s * 10)) for s in (0.2, 1.2)]
    out = pp.preprocess([], [START, AUDIO, END, 5, START, AUDIO, END], audios=clips)
    assert [a.frames for a in out.audios] == [50, 120]  # 0.2 s is padded to min_length (8000 samples)
    assert [a.token_count for a in out.audios] == [7, 13 + 3] and [a.samples for a in out.audios] == [3200, 19200]
    t = out.audio_tensors
    assert t["input_audio_features"].shape == (2, 128, 120) and t["audio_feature_lengths"].tolist() == [50, 120]
    assert t["feature_attention_mask"].sum(1).tolist() == [50, 120] and not t["input_audio_features"][0, :, 50:].any()
    for i, c in enumerate(clips):
        assert np.array_equal(t["input_audio_features"][i, :, :out.audios[i].frames], _features(c))


def test_max_seconds(pp):
    clip = audiogen.clip(seconds=2.0, rate=16000, channels=1, fmt="wav_f32")
    out = pp.preprocess([], [AUDIO], audios=[clip], audio_options=AudioOptions(max_seconds=1.5))
    (a,) = out.audios
    assert (a.samples, a.frames, a.token_count) == (24000, 150, 13 + 7)
    full = _features(clip)
    assert np.abs(out.audio_tensors["input_audio_features"][0] - full[:, :150]).max() < 1.0  # its own floor and edge


@pytest.mark.parametrize("fmt", ["wav_s16", "flac"])
def test_plan_from_the_header_equals_preprocess(pp, fmt):
    clip = audiogen.clip(seconds=0.77, rate=22050, channels=2, fmt=fmt)
    ids = [1, START, AUDIO, END, 2]
    plan, out = pp.plan([], ids, audios=[clip]), pp.preprocess([], ids, audios=[clip])
    assert plan.audios == out.audios and plan.input_ids_length == len(out.input_ids)


def test_images_and_videos_are_refused_before_anything_is_read(pp):
    png = imagegen.png(20, 30, seed=1)
    with pytest.raises(PreprocessError, match="takes no images") as e:
        pp.preprocess([png], [151655, AUDIO], audios=[audiogen.clip(seconds=0.5)])
    assert e.value.code is Code.FAILED_PRECONDITION
    with pytest.raises(PreprocessError, match="takes no images") as e:
        pp.plan([png], None)
    assert e.value.code is Code.FAILED_PRECONDITION
    with pytest.raises(PreprocessError, match="takes no video") as e:
        pp.check_request(0, None, videos=1)
    assert e.value.code is Code.FAILED_PRECONDITION
    with pytest.raises(PreprocessError, match="audio clip placeholder") as e:
        pp.preprocess([], [1, 2], audios=[audiogen.clip(seconds=0.5)])
    assert e.value.code is Code.INVALID_ARGUMENT


def test_no_clip_compiles_after_warmup():
    import gc

    from numba.core.dispatcher import Dispatcher

    def compiled() -> dict[str, int]:
        return {f"{d.py_func.__module__}.{d.py_func.__qualname__}@{id(d)}": len(d.overloads)
                for d in gc.get_objects() if issubclass(type(d), Dispatcher)}

    pp = Preprocessor.from_model(MODEL, cache_bytes=0)
    pp.warmup()
    before = compiled()
    clips = [audiogen.clip(seconds=s, rate=r, channels=c, fmt=f) for s, r, c, f in
             ((0.4, 44100, 2, "mp3"), (1.7, 48000, 1, "wav_s16"), (0.3, 16000, 1, "flac"))]
    pp.preprocess([], audios=clips)
    after = compiled()
    assert {k: n for k, n in after.items() if n != before.get(k, 0)} == {}
