"""Token layout: expansion, ranges and placeholder checks derive from one value."""

from __future__ import annotations

import numpy as np
import pytest

import imagegen
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.core.layout import Expansion, apply_layout, placeholder_layout

IMG = 151655


def test_apply_layout_ranges():
    structural = Expansion(np.array([7, 9, 9, 8, 9, 7], dtype=np.int64), patch_id=9)
    plain = Expansion.repeat(9, 3)
    applied = apply_layout(placeholder_layout([1, 5, 2, 5, 3], 5, [structural, plain]))
    assert applied.input_ids.tolist() == [1, 7, 9, 9, 8, 9, 7, 2, 9, 9, 9, 3]
    assert applied.structural_ranges == ((1, 6), (8, 3))
    assert applied.patch_ranges == (((2, 2), (5, 1)), ((8, 3),))


@pytest.mark.parametrize("ids,n", [([1, 2, 3], 1), ([5, 5], 1), ([5], 2)])
def test_placeholder_count_mismatch(ids, n):
    with pytest.raises(PreprocessError) as e:
        placeholder_layout(ids, 5, [Expansion.repeat(5, 2)] * n)
    assert e.value.code is Code.INVALID_ARGUMENT and "placeholder" in e.value.message


def test_driver_expansion_and_ranges():
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct")
    ids = [100, 151652, IMG, 151653, 200, 151652, IMG, 151653, 300]
    raws = [imagegen.png(300, 500), imagegen.png(56, 56)]
    out = pp.preprocess(raws, input_ids=ids)
    n0, n1 = out.token_counts
    assert (n0, n1) == (198, 4)  # 300x500 -> 308x504 -> 22x36 patches / 4; 56x56 -> 4x4 / 4
    expected = [100, 151652] + [IMG] * n0 + [151653, 200, 151652] + [IMG] * n1 + [151653, 300]
    assert out.input_ids.tolist() == expected
    assert out.original_input_ids.tolist() == ids
    assert out.structural_ranges == [(2, n0), (2 + n0 + 3, n1)]
    assert out.patch_ranges == [((2, n0),), ((2 + n0 + 3, n1),)]
    assert out.input_ids.dtype == np.int64


def test_default_input_ids_are_placeholders():
    pp = Preprocessor.from_model("Qwen/Qwen3-VL-8B-Instruct")
    out = pp.preprocess([imagegen.png(300, 500)])
    assert out.original_input_ids.tolist() == [IMG]
    assert out.input_ids.tolist() == [IMG] * out.token_counts[0]


def test_mismatch_rejected_before_work():
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct")
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([imagegen.png(10, 10), b"not even an image"], input_ids=[1, IMG, 2])
    assert e.value.code is Code.INVALID_ARGUMENT
    assert "1 image placeholder" in e.value.message and "2 image(s)" in e.value.message
