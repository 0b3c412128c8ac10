"""The preprocessing cache: hits are bit-identical to fresh work, keyed by bytes and spec,
bounded in bytes."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import imagegen
from sglang_mm_grpc import Preprocessor

QWEN = "Qwen/Qwen2-VL-7B-Instruct"
A, B, C = imagegen.png(300, 500, seed=1), imagegen.jpeg(480, 640, seed=2), imagegen.png(61, 87, seed=3)


def same(x, y):
    assert np.array_equal(x.input_ids, y.input_ids)
    assert np.array_equal(x.pixel_values, y.pixel_values)
    assert x.tensors.keys() == y.tensors.keys()
    for k in x.tensors:
        assert np.array_equal(x.tensors[k], y.tensors[k])
    assert [replace(im, cached=False) for im in x.images] == [replace(im, cached=False) for im in y.images]
    assert np.array_equal(x.positions, y.positions) and x.rope_delta == y.rope_delta


@pytest.mark.parametrize("model", [QWEN, "llava-hf/llava-v1.6-mistral-7b-hf", "mistral-community/pixtral-12b"])
def test_hits_equal_fresh_work(model):
    cached = Preprocessor.from_model(model)
    fresh = Preprocessor.from_model(model, cache_bytes=0)
    assert fresh.cache is None
    first = cached.preprocess([A])
    again = cached.preprocess([A])
    assert [t["cached"] for t in again.item_timings_ms] == [True]
    assert again.pixel_values is first.pixel_values  # one image: the cached tensor itself
    assert not again.pixel_values.flags.writeable
    same(again, fresh.preprocess([A]))
    # mixed hits and misses, in any order, with padding between slots
    for batch in ([B, A], [A, C, B], [C, C]):
        out = cached.preprocess(batch)
        same(out, fresh.preprocess(batch))
    assert cached.cache.stats.hits >= 5


def test_key_includes_the_model_spec(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"max_pixels": 50000}))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}))
    small = Preprocessor.from_model(str(tmp_path))
    default = Preprocessor.from_model(QWEN)
    assert small.spec_key != default.spec_key
    a, b = small.preprocess([B]), default.preprocess([B])
    assert a.pixel_values.shape != b.pixel_values.shape


def test_bounded_in_bytes():
    one = Preprocessor.from_model(QWEN, cache_bytes=0).preprocess([A]).pixel_values.nbytes
    pp = Preprocessor.from_model(QWEN, cache_bytes=int(one * 2.5))
    raws = [imagegen.png(300, 500, seed=s) for s in range(6)]
    for r in raws:
        pp.preprocess([r])
    stats = pp.cache.stats
    assert stats.bytes <= stats.max_bytes and stats.items == 2 and stats.evictions == 4
    assert [t["cached"] for t in pp.preprocess([raws[-1]]).item_timings_ms] == [True]
    assert [t["cached"] for t in pp.preprocess([raws[0]]).item_timings_ms] == [False]


def test_oversized_items_are_not_cached():
    pp = Preprocessor.from_model(QWEN, cache_bytes=1000)
    out = pp.preprocess([A])
    pp.preprocess([A])
    assert pp.cache.stats.items == 0 and pp.cache.stats.too_large == 2
    assert out.pixel_values.flags.writeable  # the caller's output, not shared with the cache


def test_oversized_items_of_a_batch_are_counted_not_kept():
    pp = Preprocessor.from_model(QWEN, cache_bytes=1000)
    pp.preprocess([A, A])
    assert pp.cache.stats.items == 0 and pp.cache.stats.too_large == 2


def test_a_cached_lone_image_is_shared_read_only():
    pp = Preprocessor.from_model(QWEN)
    out = pp.preprocess([A])
    assert pp.cache.stats.items == 1 and not out.pixel_values.flags.writeable


def test_warmup_and_uncached_calls_leave_the_cache_alone():
    """Neither the model's warm-up nor a ``use_cache=False`` call reads, fills or counts
    in the cache, so its stats describe requests only."""
    pp = Preprocessor.from_model(QWEN)
    pp.warmup()
    out = pp.preprocess([A], use_cache=False)
    st = pp.cache.stats
    assert (st.hits, st.misses, st.items, st.bytes) == (0, 0, 0, 0)
    assert out.pixel_values.flags.writeable  # not a cached (read-only) tensor
    pp.preprocess([A])
    assert (pp.cache.stats.misses, pp.cache.stats.items) == (1, 1)


def test_an_image_in_the_callers_memory_is_kept_from_its_second_miss():
    """Pixels written into the caller's memory (a shared-memory segment a worker reads and
    removes) cost the cache a copy: a first miss is not kept, a second one is, and the
    third call hits with the same output; an image in the request's own arrays is kept at
    once."""
    lent: list[np.ndarray] = []

    def allocate(shape, tensor, dtype):
        lent.append(np.empty(shape, dtype))
        return lent[-1]

    pp = Preprocessor.from_model(QWEN)
    first = pp.preprocess([A], allocate=allocate)
    assert first.pixel_values is lent[0] and pp.cache.stats.items == 0
    second = pp.preprocess([A], allocate=allocate)
    assert pp.cache.stats.items == 1 and [t["cached"] for t in second.item_timings_ms] == [False]
    lent[1][:] = 0  # the caller's memory is theirs: the cache kept a copy
    third = pp.preprocess([A], allocate=allocate)
    assert [t["cached"] for t in third.item_timings_ms] == [True]
    same(third, first)
    pp.preprocess([B])  # the request's own arrays
    assert [t["cached"] for t in pp.preprocess([B]).item_timings_ms] == [True]
