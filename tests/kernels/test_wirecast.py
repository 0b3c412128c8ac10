"""float32 -> float32 / bfloat16 / float16 written into any byte offset, nearest-even.

References: numpy's own ``astype(np.float16)`` (IEEE round to nearest, ties to even,
subnormals and overflow included), and for bfloat16 the array formula of ``bf16.py``,
which tests/kernels/test_bf16.py holds to torch's ``.to(torch.bfloat16)`` (committed
fixtures, and millions of patterns when torch is installed). Every float32 exponent is
covered, with the rounding boundaries of both formats.
"""

from __future__ import annotations

import numpy as np
import pytest

from sglang_mm_grpc.kernels import bf16, wirecast


def patterns() -> np.ndarray:
    """Random words, every exponent with mantissas around both rounding points, the
    specials (zeros, infinities, NaNs) and the float16 edges (largest normal, the overflow
    threshold, the smallest normal and subnormals, the zero threshold)."""
    rng = np.random.default_rng(11)
    words = [rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32)]
    exps = np.arange(256, dtype=np.uint32) << np.uint32(23)
    mants = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001, 0x17FFF,
                      0x18000, 0x7FFFFF, 0x400000, 0x7FE000, 0x7FF000], dtype=np.uint32)
    grid = (exps[:, None] | mants[None, :]).reshape(-1)
    words += [grid, grid | np.uint32(0x80000000)]
    edges = np.array([0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x38800000, 0x387FFFFF, 0x387FF000,
                      0x33000000, 0x33000001, 0x33800000, 0x337FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
                      0x7F800001, 0xFFFFFFFF, 0x00000001, 0x80000000, 0], dtype=np.uint32)
    words += [edges, np.arange(0x33000000, 0x39000000, 4099, dtype=np.uint32)]
    return np.concatenate(words).view(np.float32)


@pytest.fixture(scope="module")
def values():
    return patterns()


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_float16_is_numpys_nearest_even(values, offset):
    buf = np.zeros(values.size * 2 + 8, np.uint8)
    wirecast.cast_into(values, buf[offset : offset + values.size * 2], "float16")
    got = buf[offset : offset + values.size * 2].view(np.uint16) if offset % 2 == 0 else \
        np.frombuffer(buf[offset : offset + values.size * 2].tobytes(), np.uint16)
    with np.errstate(all="ignore"):
        want = values.astype(np.float16).view(np.uint16)
    nan = np.isnan(values)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.isnan(got[nan].view(np.float16)).all()  # a NaN stays a NaN
    assert np.all(buf[:offset] == 0) and np.all(buf[offset + values.size * 2 :] == 0)  # nothing else written


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_bfloat16_is_torchs_nearest_even(values, offset):
    buf = np.zeros(values.size * 2 + 8, np.uint8)
    wirecast.cast_into(values, buf[offset : offset + values.size * 2], "bfloat16")
    got = np.frombuffer(buf[offset : offset + values.size * 2].tobytes(), np.uint16)
    assert np.array_equal(got, bf16.to_bf16_bits(values))
    assert np.all(buf[:offset] == 0) and np.all(buf[offset + values.size * 2 :] == 0)


@pytest.mark.parametrize("offset", [0, 3])
def test_float32_is_a_copy(values, offset):
    buf = np.zeros(values.size * 4 + 8, np.uint8)
    wirecast.cast_into(values, buf[offset : offset + values.size * 4], "float32")
    assert buf[offset : offset + values.size * 4].tobytes() == values.tobytes()


def test_shapes_and_order():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    buf = np.zeros(48, np.uint8)
    wirecast.cast_into(a.transpose(2, 0, 1), buf, "float16")  # not C-contiguous: C order of the array given
    assert buf.tobytes() == np.ascontiguousarray(a.transpose(2, 0, 1)).astype("<f2").tobytes()
    wirecast.cast_into(np.zeros((0, 5), np.float32), np.zeros(0, np.uint8), "bfloat16")  # empty
    with pytest.raises(ValueError, match="destination"):
        wirecast.cast_into(a, np.zeros(47, np.uint8), "float16")


def test_pixel_values_are_exact_in_bfloat16_when_the_model_is():
    """What bf16 costs: nothing for values that are bf16 already (Llama 4's torchvision
    path computes in bf16); for the others, the rounding a bf16 model applies itself."""
    lut = bf16.bf16_backend_lut((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    buf = np.zeros(lut.size * 2, np.uint8)
    wirecast.cast_into(lut, buf, "bfloat16")
    assert np.array_equal(bf16.from_bf16_bits(buf.view(np.uint16)).reshape(lut.shape), lut)


def test_warmup_compiles_every_kernel():
    wirecast.warmup()
    for kernel in (wirecast.copy_words, wirecast.to_bf16, wirecast.to_f16):
        assert kernel.signatures
