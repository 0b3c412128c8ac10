"""The preprocessing cache holds audio clips: a repeated clip is neither decoded,
resampled nor processed again, and its outputs equal fresh work; entries are keyed by the
clip's bytes, the model, the extractor its options configure and the caller's scope;
a Plan reads them without counting; a clip that fails is not kept; bounded in bytes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("av")

import audiogen  # noqa: E402
import imagegen  # noqa: E402
from sglang_mm_grpc import Preprocessor, PreprocessError  # noqa: E402
from sglang_mm_grpc.core.carriers import AudioOptions  # noqa: E402

ASR, INKLING = "Qwen/Qwen3-ASR-1.7B-hf", "thinkingmachines/Inkling"
ASR_IDS = [1, 151669, 151676, 151670, 2]
MP3 = audiogen.clip(seconds=2.3, rate=44100, channels=2, fmt="mp3", seed=4)
WAV = audiogen.clip(seconds=0.7, rate=16000, channels=1, fmt="wav_s16", seed=5)


def same(x, y):
    assert np.array_equal(x.input_ids, y.input_ids)
    assert x.audio_tensors.keys() == y.audio_tensors.keys()
    for k in x.audio_tensors:
        assert np.array_equal(x.audio_tensors[k], y.audio_tensors[k]) and x.audio_tensors[k].dtype == y.audio_tensors[k].dtype
    assert x.audios == y.audios


@pytest.mark.parametrize("model,ids,images", [
    (ASR, ASR_IDS, []),
    (INKLING, [1, 200005, 200054, 13, 200020, 200053, 13, 200020, 200053, 2], [imagegen.png(70, 90, seed=6)]),
])
def test_a_repeated_clip_is_not_decoded_again_and_equals_fresh_work(model, ids, images):
    clips = [MP3] if model == ASR else [MP3, WAV]
    cached = Preprocessor.from_model(model, cache_bytes=1 << 26)
    fresh = Preprocessor.from_model(model, cache_bytes=0)
    first = cached.preprocess(images, ids, audios=clips)
    assert first.timings_ms["audio_decode_ms"] > 0 and cached.cache.stats.hits == 0
    again = cached.preprocess(images, ids, audios=clips)
    assert again.timings_ms["audio_decode_ms"] == again.timings_ms["audio_resample_ms"] == 0.0
    assert cached.cache.stats.hits == len(clips) + len(images)
    same(again, first)
    same(again, fresh.preprocess(images, ids, audios=clips))


def test_entries_are_keyed_by_extractor_model_and_scope():
    pp = Preprocessor.from_model(ASR, cache_bytes=1 << 26)
    whole = pp.preprocess([], ASR_IDS, audios=[MP3])
    cut = pp.preprocess([], ASR_IDS, audios=[MP3], audio_options=AudioOptions(max_seconds=1.0))
    other = pp.preprocess([], ASR_IDS, audios=[MP3], scope="tenant-b")
    s = pp.cache.stats
    assert (s.hits, s.misses, s.items) == (0, 3, 3)
    assert cut.audios[0].frames == 100 < whole.audios[0].frames == other.audios[0].frames
    assert pp.preprocess([], ASR_IDS, audios=[MP3], audio_options=AudioOptions(max_seconds=1.0)).audios == cut.audios
    assert pp.cache.stats.hits == 1


def test_plan_reads_a_cached_clip_exactly_without_counting():
    pp = Preprocessor.from_model(ASR, cache_bytes=1 << 26)
    out = pp.preprocess([], ASR_IDS, audios=[MP3])
    before = pp.cache.stats
    plan = pp.plan([], ASR_IDS, audios=[MP3])
    assert pp.cache.stats == before
    (a,) = plan.audios
    assert (a.samples, a.frames, a.token_count, a.sample_rate, a.channels) == (
        out.audios[0].samples, out.audios[0].frames, out.audios[0].token_count, 44100, 2)
    assert plan.input_ids_length == len(out.input_ids)


def test_a_failing_clip_is_not_kept_and_the_cache_stays_bounded():
    pp = Preprocessor.from_model(ASR, cache_bytes=1 << 26)
    with pytest.raises(PreprocessError):
        pp.preprocess([], ASR_IDS, audios=[audiogen.hostile()["truncated_m4a"]])
    assert pp.cache.stats.items == 0
    small = Preprocessor.from_model(ASR, cache_bytes=4096)  # a 2.3 s clip's features are 118 KB
    small.preprocess([], ASR_IDS, audios=[MP3])
    s = small.cache.stats
    assert (s.items, s.bytes, s.too_large) == (0, 0, 1)
