"""Video preprocessing cache: a video preprocessed again with the same bytes, options and
model comes from the cache (``VideoResult.cached``, not decoded: it succeeds even past its
decode deadline) with outputs equal to a fresh preprocess; another fps, another model or
the cache turned off preprocess anew; a hit is still held to the limits and the budget."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("av")

import videogen  # noqa: E402

from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.pipeline.cache import PreprocessCache  # noqa: E402
from sglang_mm_grpc.core.carriers import VideoOptions  # noqa: E402
from sglang_mm_grpc.core.errors import PreprocessError  # noqa: E402
from sglang_mm_grpc.media.video import VideoLimits  # noqa: E402

QWEN2, QWEN3 = "Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"
PROMPT = [1, 151652, 151656, 151653, 2]
TWO = [1, 151652, 151656, 151653, 151652, 151656, 151653, 2]
FPS2 = VideoOptions(fps=2)


@pytest.fixture(scope="module")
def clips():
    return (videogen.clip(frames=30, fps=10, size=(64, 96), gop=6),
            videogen.clip(frames=24, fps=8, size=(56, 84), noise=8))


def _same(a, b) -> None:
    assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.positions, b.positions)
    assert a.pixel_values_videos.shape == b.pixel_values_videos.shape
    assert np.array_equal(a.pixel_values_videos.view(np.uint32), b.pixel_values_videos.view(np.uint32))
    assert a.video_tensors.keys() == b.video_tensors.keys()
    for k in a.video_tensors:
        assert np.array_equal(a.video_tensors[k], b.video_tensors[k])
    for x, y in zip(a.videos, b.videos):
        assert (x.grid, x.frame_indices, x.token_count, x.hash, x.options) == (y.grid, y.frame_indices, y.token_count,
                                                                              y.hash, y.options)


def test_a_repeated_video_comes_from_the_cache_undecoded(clips):
    pp = Preprocessor.from_model(QWEN2)
    fresh = pp.preprocess([], PROMPT, videos=[clips[0]], video_options=FPS2, use_cache=False)
    assert pp.cache.stats.items == 0
    first = pp.preprocess([], PROMPT, videos=[clips[0]], video_options=FPS2)
    assert not first.videos[0].cached and pp.cache.stats.items == 1
    # decoding now would miss its deadline: a hit never decodes
    again = pp.preprocess([], PROMPT, videos=[clips[0]], video_options=FPS2, deadline=time.monotonic() - 1)
    assert again.videos[0].cached and pp.cache.stats.hits == 1
    _same(again, fresh)
    assert not again.pixel_values_videos.flags.writeable  # the cached array itself
    with pytest.raises(PreprocessError) as e:  # not cached: decoded, and too late
        pp.preprocess([], PROMPT, videos=[clips[0]], video_options=FPS2, deadline=time.monotonic() - 1, use_cache=False)
    assert e.value.code.value == "DEADLINE_EXCEEDED"
    assert pp.plan([], PROMPT, videos=[clips[0]], video_options=FPS2).videos[0].cached
    assert not pp.plan([], PROMPT, videos=[clips[1]], video_options=FPS2).videos[0].cached


def test_the_key_holds_the_sampling_options_and_the_model(clips):
    cache = PreprocessCache(1 << 30)
    q2, q3 = Preprocessor.from_model(QWEN2, cache=cache), Preprocessor.from_model(QWEN3, cache=cache)
    q2.preprocess([], PROMPT, videos=[clips[0]], video_options=FPS2)
    for pp, opts in ((q2, VideoOptions(fps=4)), (q2, VideoOptions(num_frames=4)), (q2, VideoOptions(max_pixels=3136)),
                     (q3, FPS2)):
        out = pp.preprocess([], PROMPT, videos=[clips[0]], video_options=opts)
        assert not out.videos[0].cached, opts
        _same(out, pp.preprocess([], PROMPT, videos=[clips[0]], video_options=opts, use_cache=False))
    assert cache.stats.items == 5 and cache.stats.hits == 0
    # the same options again, spelled per video: a hit
    assert q2.preprocess([], PROMPT, videos=[clips[0]], per_video_options=[VideoOptions(fps=4)]).videos[0].cached


def test_cached_and_new_videos_in_one_request(clips):
    pp = Preprocessor.from_model(QWEN2)
    pp.preprocess([], PROMPT, videos=[clips[1]], video_options=FPS2)
    mixed = pp.preprocess([], TWO, videos=list(clips), video_options=FPS2)
    assert [v.cached for v in mixed.videos] == [False, True]
    _same(mixed, pp.preprocess([], TWO, videos=list(clips), video_options=FPS2, use_cache=False))
    both = pp.preprocess([], TWO, videos=list(clips), video_options=FPS2, deadline=time.monotonic() - 1)
    assert [v.cached for v in both.videos] == [True, True]
    _same(both, mixed)


def test_videos_too_large_for_the_cache_are_counted_not_kept(clips):
    pp = Preprocessor.from_model(QWEN2, cache_bytes=1024)  # smaller than either video's rows
    out = pp.preprocess([], TWO, videos=list(clips), video_options=FPS2)
    assert pp.cache.stats.items == 0 and pp.cache.stats.too_large == 2
    assert [v.cached for v in pp.preprocess([], TWO, videos=list(clips), video_options=FPS2).videos] == [False, False]
    _same(out, pp.preprocess([], TWO, videos=list(clips), video_options=FPS2, use_cache=False))


def test_a_hit_is_held_to_the_limits_and_the_budget(clips):
    cache = PreprocessCache(1 << 30)
    Preprocessor.from_model(QWEN2, cache=cache).preprocess([], PROMPT, videos=[clips[0]], video_options=FPS2)
    strict = Preprocessor.from_model(QWEN2, cache=cache, video_limits=VideoLimits(max_bytes=len(clips[0]) - 1))
    with pytest.raises(PreprocessError) as e:
        strict.preprocess([], PROMPT, videos=[clips[0]], video_options=FPS2)
    assert e.value.code.value == "RESOURCE_EXHAUSTED" and "max_bytes" in e.value.message
    pp = Preprocessor.from_model(QWEN2, cache=cache)
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([], PROMPT, videos=[clips[0]], video_options=VideoOptions(fps=2, max_tokens=10))
    assert e.value.code.value == "RESOURCE_EXHAUSTED" and "max_tokens" in e.value.message
