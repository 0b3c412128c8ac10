"""Audio clips through ``Preprocessor.preprocess`` and ``plan`` (Inkling): the clip decoded,
mixed to mono and resampled (``media.audio``, checked against vLLM's loader in
test_audio_decode.py / test_audio_resample.py), its dMel bins (``families.inkling.audio``,
checked against transformers in test_inkling_audio.py) and the placeholder expanded to one
token per frame, laid out with the images; and the request-level refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import audiogen
import imagegen
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.core.carriers import AudioOptions
from sglang_mm_grpc.families.inkling import audio as inkling_audio
from sglang_mm_grpc.media import audio as media_audio

pytest.importorskip("av")

INKLING = "thinkingmachines/Inkling"
IMAGE, IMAGE_BOS, AUDIO, AUDIO_BOS = 200054, 200005, 200053, 200020


@pytest.fixture(scope="module")
def pp():
    return Preprocessor.from_model(INKLING, cache_bytes=0)


def _features(clip: bytes) -> np.ndarray:
    """The clip's bins from its decoded, resampled waveform (the steps each checked elsewhere)."""
    meta = media_audio.probe(clip)
    wave = media_audio.resample(media_audio.decode(clip, meta), meta.sample_rate, 16000)
    return inkling_audio.dmel(wave)


def test_a_clip_between_images_is_expanded_and_featurized(pp):
    clip = audiogen.clip(seconds=1.3, rate=44100, channels=2, fmt="wav_s16")
    png = imagegen.png(50, 60, seed=1)
    ids = [1, IMAGE_BOS, IMAGE, 7, AUDIO_BOS, AUDIO, 8, IMAGE_BOS, IMAGE, 2]
    out = pp.preprocess([png, png], ids, audios=[clip])
    (a,) = out.audios
    samples = math.ceil(1.3 * 44100 * 16000 / 44100)
    assert (a.sample_rate, a.channels, a.samples, a.frames) == (44100, 2, samples, math.ceil(samples / 800))
    image_tokens = out.images[0].token_count
    offset = 2 + image_tokens + 2  # after 1, the image bos, its tokens, 7 and the audio bos
    assert a.structural_range == (offset, a.frames) and a.patch_ranges == ((offset, a.frames),)
    expanded = out.input_ids
    assert expanded[offset - 1] == AUDIO_BOS and (expanded[offset:offset + a.frames] == AUDIO).all()
    assert expanded[offset + a.frames] == 8 and out.images[1].structural_range[0] == offset + a.frames + 2
    assert out.audio_token_id == AUDIO
    features = out.audio_tensors["input_audio_features"]
    assert features.dtype == np.int32 and np.array_equal(features, _features(clip))
    assert out.audio_tensors["num_audio_tokens"].tolist() == [a.frames]


def test_clips_join_along_the_frames(pp):
    clips = [audiogen.clip(seconds=s, rate=16000, channels=1, fmt="flac", seed=int(s * 10)) for s in (0.5, 1.2)]
    out = pp.preprocess([], [AUDIO_BOS, AUDIO, 5, AUDIO_BOS, AUDIO], audios=clips)
    counts = [a.frames for a in out.audios]
    assert out.audio_tensors["num_audio_tokens"].tolist() == counts == [10, 24]
    assert np.array_equal(out.audio_tensors["input_audio_features"], np.concatenate([_features(c) for c in clips]))
    assert len(out.input_ids) == 5 - 2 + sum(counts)


def test_max_seconds_keeps_the_first_seconds(pp):
    clip = audiogen.clip(seconds=2.0, rate=16000, channels=1, fmt="wav_f32")
    out = pp.preprocess([], audios=[clip], audio_options=AudioOptions(max_seconds=0.5))
    (a,) = out.audios
    assert (a.samples, a.frames, a.options) == (8000, 10, AudioOptions(max_seconds=0.5))
    assert np.array_equal(out.audio_tensors["input_audio_features"], _features(clip)[:10])
    per_clip = pp.preprocess([], audios=[clip, clip], per_audio_options=[None, AudioOptions(max_seconds=1.0)])
    assert [x.frames for x in per_clip.audios] == [40, 20]


@pytest.mark.parametrize("fmt", ["wav_s16", "flac"])
def test_plan_from_the_header_equals_preprocess_where_the_header_is_exact(pp, fmt):
    clip = audiogen.clip(seconds=0.77, rate=22050, channels=2, fmt=fmt)
    ids = [1, AUDIO_BOS, AUDIO, 2]
    plan, out = pp.plan([], ids, audios=[clip]), pp.preprocess([], ids, audios=[clip])
    assert plan.audios == out.audios and plan.input_ids_length == len(out.input_ids)


def test_refusals(pp):
    clip = audiogen.clip(seconds=0.5, rate=16000, channels=1, fmt="wav_s16")
    qwen = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct", cache_bytes=0)
    with pytest.raises(PreprocessError, match="takes no audio") as e:
        qwen.preprocess([], audios=[clip])
    assert e.value.code is Code.FAILED_PRECONDITION
    with pytest.raises(PreprocessError, match="audio clip placeholder") as e:
        pp.preprocess([], [1, 2], audios=[clip])
    assert e.value.code is Code.INVALID_ARGUMENT
    few = Preprocessor.from_model(INKLING, cache_bytes=0, max_audio_tokens=5, max_audios=1)
    with pytest.raises(PreprocessError, match="over the model's max_audio_tokens") as e:
        few.preprocess([], audios=[clip])
    assert e.value.code is Code.RESOURCE_EXHAUSTED and e.value.item == 0
    with pytest.raises(PreprocessError, match="max_audios") as e:
        few.preprocess([], audios=[clip, clip])
    assert e.value.code is Code.RESOURCE_EXHAUSTED
    with pytest.raises(PreprocessError, match="audio clips") as e:
        pp.preprocess([], audios=clip)


def test_no_clip_compiles_after_warmup():
    """The resampler and the features warm with the model (``Preprocessor.warmup``)."""
    import gc

    from numba.core.dispatcher import Dispatcher

    def compiled() -> dict[str, int]:
        return {f"{d.py_func.__module__}.{d.py_func.__qualname__}@{id(d)}": len(d.overloads)
                for d in gc.get_objects() if issubclass(type(d), Dispatcher)}

    pp = Preprocessor.from_model(INKLING, cache_bytes=0)
    pp.warmup()
    before = compiled()
    clips = [audiogen.clip(seconds=0.4, rate=r, channels=c, fmt=f) for r, c, f in
             ((44100, 2, "mp3"), (48000, 1, "wav_s16"), (16000, 1, "flac"), (22050, 2, "aac"))]
    pp.preprocess([], audios=clips)
    after = compiled()
    assert {k: n for k, n in after.items() if n != before.get(k, 0)} == {}


def test_a_known_hash_is_not_computed_again(pp):
    """A clip named by media id comes with its blake3 (the store's key): the driver takes it."""
    clip = audiogen.clip(seconds=0.3, rate=16000, channels=1, fmt="wav_s16")
    known = "ab" * 32
    assert pp.preprocess([], audios=[clip], audio_hashes=[known]).audios[0].hash == known
    assert pp.plan([], audios=[clip], audio_hashes=[known]).audios[0].hash == known
    assert pp.preprocess([], audios=[clip]).audios[0].hash != known
