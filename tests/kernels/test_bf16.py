"""bf16 rounding and the rescale/normalize tables of the torchvision-class processors.

Committed fixtures (``bf16.json``, ``torchvision_lut.json``) check them without torch;
with torch, millions of random bit patterns and random statistics run against the real
``.to(torch.bfloat16)`` and the real ``rescale_and_normalize`` of transformers.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

import fixtures
from sglang_mm_grpc.kernels import bf16, normalize


@numba.njit(cache=False)
def _scalar_bits(x):
    out = np.empty(x.shape[0], np.uint16)
    for i in range(x.shape[0]):
        out[i] = bf16.bf16_bits(x[i])
    return out


@numba.njit(cache=False)
def _scalar_round(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = bf16.bf16_round(x[i])
    return out


def _lut_case(case) -> tuple[np.ndarray, dict]:
    fixtures.case_input(case)
    p = case["params"]
    return p, case["outputs"]["lut"]


@pytest.mark.parametrize("case", [c for c in fixtures.params("bf16") if c.values[0]["id"].startswith("to-bf16")])
def test_fixture_conversion(case):
    x = fixtures.case_input(case)
    want = case["outputs"]["bits"]
    fixtures.assert_output(bf16.to_bf16_bits(x), want, "array")
    fixtures.assert_output(_scalar_bits(x), want, "numba scalar")
    rounded = bf16.round_bf16(x)
    assert np.array_equal(bf16.to_bf16_bits(rounded), bf16.to_bf16_bits(x))  # idempotent
    assert np.array_equal(_scalar_round(x).view(np.uint32), rounded.view(np.uint32))
    assert np.array_equal(bf16.from_bf16_bits(bf16.to_bf16_bits(x)).view(np.uint32), rounded.view(np.uint32))


@pytest.mark.parametrize("case", [c for c in fixtures.params("bf16") if c.values[0]["id"].startswith("llama4-lut")])
def test_fixture_llama4_lut(case):
    p, want = _lut_case(case)
    lut = bf16.bf16_backend_lut(p["mean"], p["std"], p["rescale_factor"], p["do_rescale"], p["do_normalize"])
    fixtures.assert_output(lut, want, case["id"])
    if p["hf_dtype"] == "bfloat16":
        assert np.array_equal(bf16.round_bf16(lut), lut)


@pytest.mark.parametrize("case", fixtures.params("torchvision_lut"))
def test_fixture_torchvision_lut(case):
    p, want = _lut_case(case)
    lut = normalize.torchvision_backend_lut(p["mean"], p["std"], p["rescale_factor"], p["do_rescale"], p["do_normalize"])
    fixtures.assert_output(lut, want, case["id"])


def test_llama4_lut_refuses_normalize_without_rescale():
    with pytest.raises(ValueError):
        bf16.bf16_backend_lut([0.5] * 3, [0.5] * 3, do_rescale=False, do_normalize=True)


def test_rounding_rules():
    x = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.3961e38, 3.4e38, -0.0, np.nan], np.float32)
    bits = bf16.to_bf16_bits(x)
    assert bits[0] == 0x3F80  # tie: to even (down)
    assert bits[1] == 0x3F82  # tie: to even (up)
    assert bits[2] == 0x7F7F and bits[3] == 0x7F80  # largest finite, then overflow to inf
    assert bits[4] == 0x8000 and bits[5] == bf16.NAN_BITS


# -- against the real torch -----------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_against_torch_random_bits(torch):
    rng = np.random.default_rng(21)
    x = rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ref = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(bf16.to_bf16_bits(x), ref)
    assert np.array_equal(_scalar_bits(x), ref)


def _values(torch):
    return torch.from_numpy(np.tile(np.arange(256, dtype=np.uint8), (3, 1))).reshape(1, 3, 16, 16)


def test_against_transformers_random_statistics(torch):
    from transformers import Llama4ImageProcessor, Qwen2VLImageProcessor

    llama, qwen = Llama4ImageProcessor(), Qwen2VLImageProcessor()
    rng = np.random.default_rng(22)
    for _ in range(40):
        mean = tuple(float(v) for v in rng.uniform(0, 1, 3))
        std = tuple(float(v) for v in rng.uniform(0.05, 1, 3))
        factor = float(rng.choice([1 / 255, 0.00392156862745098, 1 / 127.5, 0.5, float(rng.uniform(0.001, 1))]))
        for do_rescale, do_normalize in ((True, True), (True, False), (False, True), (False, False)):
            ref = qwen.rescale_and_normalize(_values(torch), do_rescale, factor, do_normalize, mean, std)
            lut = normalize.torchvision_backend_lut(mean, std, factor, do_rescale, do_normalize)
            assert np.array_equal(ref.reshape(3, 256).float().numpy().view(np.uint32), lut.view(np.uint32))
            if do_normalize and not do_rescale:
                continue  # Llama 4 fails on uint8 there
            ref = llama.rescale_and_normalize(_values(torch), do_rescale, factor, do_normalize, mean, std)
            lut = bf16.bf16_backend_lut(mean, std, factor, do_rescale, do_normalize)
            assert np.array_equal(ref.reshape(3, 256).float().numpy().view(np.uint32), lut.view(np.uint32))


@pytest.mark.parametrize("name", ["bf16", "torchvision_lut"])
def test_committed_fixtures_match_installed_torch(torch, name):
    assert fixtures.generator().generate(name)["cases"] == fixtures.cases(name)
