"""window: crop / pad / tile through the normalize table equals indexing a padded canvas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_mm_grpc.kernels import normalize, window

LUT = normalize.pil_backend_lut((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))


def expected_window(img, y0, x0, h, w, fill):
    """Reference: materialise a canvas with the fill colour and slice it."""
    m = abs(y0) + abs(x0) + h + w
    canvas = np.empty((img.shape[0] + 2 * m, img.shape[1] + 2 * m, 3), np.uint8)
    canvas[...] = fill
    canvas[m:m + img.shape[0], m:m + img.shape[1]] = img
    sub = canvas[m + y0:m + y0 + h, m + x0:m + x0 + w]
    return np.stack([LUT[c][sub[..., c]] for c in range(3)])


@settings(max_examples=100, deadline=None)
@given(ih=st.integers(1, 30), iw=st.integers(1, 30), h=st.integers(1, 30), w=st.integers(1, 30),
       y0=st.integers(-40, 40), x0=st.integers(-40, 40), fill=st.sampled_from([0, (122, 116, 104)]))
def test_window_matches_padded_canvas(ih, iw, h, w, y0, x0, fill):
    img = np.random.default_rng(ih * 31 + iw).integers(0, 256, (ih, iw, 3), dtype=np.uint8)
    big = np.full((2, 3, h + 3, w + 2), np.nan, np.float32)
    window.window_chw(img, y0, x0, LUT, big[1, :, 1:h + 1, 2:], fill)
    assert np.array_equal(big[1, :, 1:h + 1, 2:], expected_window(img, y0, x0, h, w, fill))
    assert np.isnan(big[0]).all() and np.isnan(big[1, :, 0]).all() and np.isnan(big[1, :, h + 1:]).all()


@pytest.mark.parametrize("rows,cols,top,left", [(1, 2, 0, 0), (2, 2, 3, 0), (3, 1, 0, 5), (2, 3, 4, 7)])
def test_tiles_raster_order(rows, cols, top, left):
    t = 8
    shape = (max(1, rows * t - 2 * top), max(1, cols * t - 2 * left), 3)
    img = np.random.default_rng(rows * 10 + cols).integers(0, 256, shape, dtype=np.uint8)
    out = np.empty((rows * cols, 3, t, t), np.float32)
    window.tiles_chw(img, top, left, rows, cols, LUT, out)
    for r in range(rows):
        for q in range(cols):
            assert np.array_equal(out[r * cols + q], expected_window(img, r * t - top, q * t - left, t, t, 0))


def test_checks():
    img = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError):
        window.window_chw(img.astype(np.float32), 0, 0, LUT, np.empty((3, 2, 2), np.float32))
    with pytest.raises(ValueError):
        window.window_chw(img, 0, 0, LUT, np.empty((3, 2, 2), np.float64))
    with pytest.raises(ValueError):
        window.tiles_chw(img, 0, 0, 2, 2, LUT, np.empty((3, 3, 2, 2), np.float32))


@pytest.mark.parametrize("table", ["arithmetic", "bf16", "lookup"])
def test_rgbx_is_read_like_rgb(table):
    """Pillow's RGBX buffer (a fourth, ignored byte per pixel) read in place gives the
    values of its packed RGB, through each normalize path, for windows, tiles and chw."""
    from sglang_mm_grpc.kernels import bf16, chw

    rng = np.random.default_rng(9)
    rgb = rng.integers(0, 256, (45, 67, 3), dtype=np.uint8)
    rgbx = np.full((45, 67, 4), 200, np.uint8)
    rgbx[:, :, :3] = rgb
    lut = {"arithmetic": LUT, "bf16": bf16.bf16_backend_lut((0.5,) * 3, (0.5,) * 3),
           "lookup": normalize.pil_backend_lut((0.5,) * 3, (0.5,) * 3, 0.01)}[table]
    want, got = np.empty((6, 3, 30, 30), np.float32), np.empty((6, 3, 30, 30), np.float32)
    window.tiles_chw(rgb, 4, -3, 2, 3, lut, want, fill=7)
    window.tiles_chw(rgbx, 4, -3, 2, 3, lut, got, fill=7)
    assert np.array_equal(got, want)
    assert np.array_equal(window.window_chw(rgbx, -2, 5, lut, np.empty((3, 20, 70), np.float32)),
                          window.window_chw(rgb, -2, 5, lut, np.empty((3, 20, 70), np.float32)))
    assert np.array_equal(chw.normalize_chw(rgbx, lut), chw.normalize_chw(rgb, lut))
