"""resize_region against the real Pillow: a window of ``Image.resize`` of the
(materialised) padded canvas, bit for bit, for every filter, pass order and mode."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from sglang_mm_grpc.kernels import resample_pil as rp
from sglang_mm_grpc.kernels import resize_region as rr

FILTERS = [rp.NEAREST, rp.LANCZOS, rp.BILINEAR, rp.BICUBIC, rp.BOX, rp.HAMMING]


def pillow(canvas: np.ndarray, out_h: int, out_w: int, f: int) -> np.ndarray:
    if canvas.shape[2] == 1:
        return np.asarray(Image.fromarray(canvas[..., 0], "L").resize((out_w, out_h), f))[..., None]
    return np.asarray(Image.fromarray(canvas, "RGB").resize((out_w, out_h), f))


def canvas_of(img, top, left, ch, cw, color):
    out = np.empty((ch, cw, img.shape[2]), np.uint8)
    out[...] = color
    out[top:top + img.shape[0], left:left + img.shape[1]] = img
    return out


@settings(max_examples=150, deadline=None)
@given(
    h=st.integers(1, 90), w=st.integers(1, 90), nc=st.sampled_from([1, 3]), f=st.sampled_from(FILTERS),
    pad_h=st.integers(0, 40), pad_w=st.integers(0, 40), padded=st.booleans(),
    out_h=st.integers(1, 130), out_w=st.integers(1, 130), same_h=st.booleans(), same_w=st.booleans(),
    data=st.data(),
)
def test_window_of_resize(h, w, nc, f, pad_h, pad_w, padded, out_h, out_w, same_h, same_w, data):
    rng = np.random.default_rng(h * 131 + w)
    img = rng.integers(0, 256, (h, w, nc), dtype=np.uint8)
    pad = None
    canvas = img
    if padded:
        ch, cw = h + pad_h, w + pad_w
        top, left = data.draw(st.integers(0, pad_h)), data.draw(st.integers(0, pad_w))
        color = tuple(int(v) for v in rng.integers(0, 256, nc))
        pad = (top, left, ch, cw, color)
        canvas = canvas_of(img, top, left, ch, cw, color)
    out_h = canvas.shape[0] if same_h else out_h
    out_w = canvas.shape[1] if same_w else out_w
    y0, x0 = data.draw(st.integers(0, out_h - 1)), data.draw(st.integers(0, out_w - 1))
    wh, ww = data.draw(st.integers(1, out_h - y0)), data.draw(st.integers(1, out_w - x0))
    got = rr.resize_region(img, out_h, out_w, f, (y0, x0, wh, ww), pad)
    assert np.array_equal(got, pillow(canvas, out_h, out_w, f)[y0:y0 + wh, x0:x0 + ww])


def _shortest_edge_crop(h: int, w: int) -> tuple[int, int, tuple[int, int, int, int]]:
    short, long = min(h, w), max(h, w)
    rh, rw = (int(336 * long / short), 336) if w <= h else (336, int(336 * long / short))
    return rh, rw, ((rh - 336) // 2, (rw - 336) // 2, 336, 336)


@pytest.mark.parametrize("h,w", [(1, 100), (100, 1), (3, 300), (1200, 400), (2000, 900)])
def test_center_crop_of_shortest_edge_resize(h, w):
    img = np.random.default_rng(1).integers(0, 256, (h, w, 3), dtype=np.uint8)
    rh, rw, (y0, x0, wh, ww) = _shortest_edge_crop(h, w)
    got = rr.resize_region(img, rh, rw, rp.BICUBIC, (y0, x0, wh, ww))
    assert np.array_equal(got, pillow(img, rh, rw, rp.BICUBIC)[y0:y0 + wh, x0:x0 + ww])


def test_thin_crop_costs_only_the_window():
    """1x2000 resizes to 336x672000 (677 MB in Pillow); the crop window is 336x336."""
    img = np.random.default_rng(1).integers(0, 256, (1, 2000, 3), dtype=np.uint8)
    rh, rw, window = _shortest_edge_crop(1, 2000)
    assert (rh, rw) == (336, 672000)
    got = rr.resize_region(img, rh, rw, rp.BICUBIC, window)
    # A 1-row source has one vertical tap of weight 1: every output row is the same.
    assert got.shape == (336, 336, 3) and (got == got[:1]).all()


@pytest.mark.parametrize("h,w", [(3000, 40), (40, 3000), (700, 500), (9, 9)])
def test_square_padding_never_materialised(h, w):
    """LLaVA's pad-to-square with the mean colour, then 336x336."""
    img = np.random.default_rng(2).integers(0, 256, (h, w, 3), dtype=np.uint8)
    side = max(h, w)
    pad = ((side - h) // 2, (side - w) // 2, side, side, (122, 116, 104))
    got = rr.resize_region(img, 336, 336, rp.BICUBIC, pad=pad)
    assert np.array_equal(got, pillow(canvas_of(img, *pad), 336, 336, rp.BICUBIC))


def test_rejects_bad_windows():
    img = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError):
        rr.resize_region(img, 5, 5, rp.BICUBIC, (3, 0, 3, 5))
    with pytest.raises(ValueError):
        rr.resize_region(img, 5, 5, rp.BICUBIC, pad=(2, 0, 5, 5, 0))
