"""kernels.bicubic_f32 against torch's CPU ``F.interpolate(mode="bicubic")`` (needs torch).

Bit for bit: down- and up-scaling, odd and 1-pixel sizes, the Phi global-image shapes;
the virtual-canvas kernel against the same resize of the canvas built explicitly.
"""

from __future__ import annotations

import numpy as np
import pytest

from sglang_mm_grpc.kernels import bicubic_f32, totensor

torch = pytest.importorskip("torch")


def interpolate(x: np.ndarray, h: int, w: int) -> np.ndarray:
    t = torch.from_numpy(x)[None]
    return torch.nn.functional.interpolate(t, size=(h, w), mode="bicubic", align_corners=False)[0].numpy()


def normalized(rng, h, w):
    return ((rng.integers(0, 256, (3, h, w)).astype(np.float32) - np.float32(127.5)) / np.float32(127.5))


SHAPES = [(50, 70, 13, 11), (30, 20, 17, 23), (448, 896, 448, 448), (1344, 1792, 448, 448), (5376, 336, 336, 336),
          (336, 4704, 336, 336), (1, 1, 5, 3), (1, 9, 1, 4), (7, 7, 7, 7), (3, 2, 40, 33)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_torch(shape):
    h, w, oh, ow = shape
    x = normalized(np.random.default_rng(h * w), h, w)
    assert np.array_equal(bicubic_f32.resize_bicubic_f32(x, oh, ow), interpolate(x, oh, ow))


def test_matches_torch_random_shapes():
    rng = np.random.default_rng(3)
    for h, w, oh, ow in rng.integers(1, 400, (40, 4)):
        x = normalized(rng, int(h), int(w))
        got = bicubic_f32.resize_bicubic_f32(x, int(oh), int(ow))
        assert np.array_equal(got, interpolate(x, int(oh), int(ow))), (h, w, oh, ow)


@pytest.mark.parametrize("top,left,canvas", [(0, 0, (672, 448)), (100, 0, (672, 672)), (0, 37, (336, 1008)),
                                             (-3, 5, (20, 30))])
def test_canvas_kernel(top, left, canvas):
    rng = np.random.default_rng(top + left)
    img = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
    lut = totensor.totensor_normalize_lut((0.48, 0.45, 0.40), (0.26, 0.26, 0.27))
    built = np.full((*canvas, 3), 255, np.uint8)
    ys, xs = slice(max(top, 0), max(min(top + 300, canvas[0]), 0)), slice(max(left, 0), max(min(left + 400, canvas[1]), 0))
    built[ys, xs] = img[ys.start - top: ys.stop - top, xs.start - left: xs.stop - left]
    dense = np.stack([lut[c][built[..., c]] for c in range(3)])
    out = np.zeros((2, 3, 336, 336), np.float32)
    bicubic_f32.resize_canvas_bicubic(img, top, left, *canvas, lut, out[1], fill=255)
    assert np.array_equal(out[1], interpolate(dense, 336, 336)) and not out[0].any()
