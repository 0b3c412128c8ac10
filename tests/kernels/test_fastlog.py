"""``kernels.fastlog``: every element equal to libm's ``math.log10`` / ``math.log``
rounded to float32, on random values over the range a log-mel sees, the mantissa and
exponent edges, and values whose logarithm lies right at a float32 rounding boundary (where
the guard hands the element to libm)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sglang_mm_grpc.kernels import fastlog

LOGS = {"log10": (fastlog.log10_f32, math.log10), "log": (fastlog.log_f32, math.log)}


def libm(fn, x: np.ndarray) -> np.ndarray:
    return np.array([fn(v) for v in x.tolist()], np.float64).astype(np.float32)


def edges() -> np.ndarray:
    sqrt2 = math.sqrt(2.0)
    values = [1.0, 10.0, 1e-10, 0.1, 2.0, 0.5, sqrt2, math.nextafter(sqrt2, 0), math.nextafter(sqrt2, 2),
              math.nextafter(1.0, 2), math.nextafter(1.0, 0), 2.0 ** -1022, 1.7e308, math.e]
    return np.array(values + [10.0 ** k for k in range(-12, 15)], np.float64)


def at_boundaries(fn) -> np.ndarray:
    """x whose log is a float32 rounding midpoint (or within a few float64 ulps of one)."""
    rng = np.random.default_rng(7)
    y = rng.uniform(-20, 25, 3000).astype(np.float32).astype(np.float64)
    mid = (y + np.nextafter(y.astype(np.float32), np.float32(np.inf)).astype(np.float64)) / 2
    inverse = (lambda v: 10.0 ** v) if fn is math.log10 else np.exp
    x = inverse(mid)
    return np.concatenate([x, np.nextafter(x, 0), np.nextafter(x, np.inf)])


@pytest.mark.parametrize("name", sorted(LOGS))
def test_equal_to_libm_rounded(name):
    fast, fn = LOGS[name]
    rng = np.random.default_rng(3)
    x = np.concatenate([10.0 ** rng.uniform(-12, 14, 150_000), rng.uniform(0.5, 2.0, 50_000), edges(),
                        at_boundaries(fn)])
    out, near = np.empty(len(x), np.float32), np.empty(len(x), np.bool_)
    fast(x, out, near)
    assert np.array_equal(out, libm(fn, x))
    assert near[-9000:].mean() > 0.5  # the guard sends the boundary values to libm


def test_the_guard_is_rarely_needed():
    x = 10.0 ** np.random.default_rng(5).uniform(-10, 10, 100_000)
    out, near = np.empty(len(x), np.float32), np.empty(len(x), np.bool_)
    fastlog.log10_f32(x, out, near)
    assert near.sum() < 20
