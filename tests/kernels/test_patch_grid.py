"""patch_grid against a plain numpy statement of what it computes: the image on a canvas
of ``rows x cols`` patches filled with the fill value, normalized through the table,
cut in raster order, each patch repeated ``T`` times; RGBA composited onto the
checkerboard first (integer arithmetic, as written out here)."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_mm_grpc.kernels import normalize, patch_grid


def _expected(rgb: np.ndarray, lut: np.ndarray, fill, rows: int, cols: int, ph: int, pw: int, reps: int):
    h, w, _ = rgb.shape
    canvas = np.empty((rows * ph, cols * pw, 3), np.float32)
    canvas[...] = np.asarray(fill, np.float32)
    hh, ww = min(h, rows * ph), min(w, cols * pw)
    for c in range(3):
        canvas[:hh, :ww, c] = lut[c][rgb[:hh, :ww, c]]
    patches = canvas.reshape(rows, ph, cols, pw, 3).transpose(0, 2, 1, 3, 4).reshape(rows * cols, ph, pw, 3)
    return np.repeat(patches[:, None], reps, axis=1)


def _checkerboard(rgba: np.ndarray, cell: int, light: int, dark: int) -> np.ndarray:
    h, w, _ = rgba.shape
    y, x = np.mgrid[:h, :w]
    bg = np.where((y // cell + x // cell) % 2 == 0, light, dark).astype(np.int64)[..., None]
    a = rgba[..., 3:].astype(np.int64)
    return ((rgba[..., :3].astype(np.int64) * a + bg * (255 - a) + 127) // 255).astype(np.uint8)


TABLES = {
    "arithmetic": normalize.torchvision_backend_lut((0.48145466, 0.4578275, 0.40821073),
                                                    (0.26862954, 0.26130258, 0.27577711)),
    "lookup": (np.round(np.tile(np.arange(256, dtype=np.float32), (3, 1)) * 3) / np.float32(7)).astype(np.float32),
}
# (h, w, rows, cols, ph, pw): on the grid, off it, an extra all-fill column, a grid
# that stops short of the image, one pixel, thin
GRIDS = [(80, 120, 2, 3, 40, 40), (37, 53, 1, 2, 40, 40), (80, 80, 2, 3, 40, 40), (37, 53, 1, 1, 40, 40),
         (1, 1, 1, 2, 40, 40), (3, 200, 1, 11, 20, 20), (65, 9, 4, 1, 20, 30), (45, 70, 3, 4, 16, 24)]


@pytest.mark.parametrize("table", sorted(TABLES))
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: "x".join(map(str, g)))
@pytest.mark.parametrize("source", ["rgb", "rgbx"])
def test_patches_equal_the_canvas_cut_up(table, grid, source):
    h, w, rows, cols, ph, pw = grid
    rng = np.random.default_rng(h * w)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    pixels = rgb if source == "rgb" else np.dstack([rgb, rng.integers(0, 256, (h, w, 1), dtype=np.uint8)])
    lut, fill = TABLES[table], (-1.5, 2.25, -7.0)
    for reps in (1, 2, 3):
        out = np.full((rows * cols, reps, ph, pw, 3), np.nan, np.float32)
        patch_grid.cut_patches(pixels, lut, fill, cols, out)
        assert np.array_equal(out, _expected(rgb, lut, fill, rows, cols, ph, pw, reps))
    flat = np.full((rows * cols, ph, pw, 3), np.nan, np.float32)  # no repeat axis
    patch_grid.cut_patches(pixels, lut, fill, cols, flat)
    assert np.array_equal(flat, _expected(rgb, lut, fill, rows, cols, ph, pw, 1)[:, 0])


@pytest.mark.parametrize("table", sorted(TABLES))
def test_rgba_is_composited_onto_the_checkerboard(table):
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 256, (53, 77, 4), dtype=np.uint8)
    rgba[:5, :, 3] = 0
    rgba[5:10, :, 3] = 255
    lut, fill = TABLES[table], (-1.0, -2.0, -3.0)
    for cell, light, dark in ((8, 204, 153), (3, 0, 255), (1, 17, 17)):
        out = np.empty((2 * 3, 2, 40, 40, 3), np.float32)
        patch_grid.cut_patches(rgba, lut, fill, 3, out, (cell, light, dark))
        assert np.array_equal(out, _expected(_checkerboard(rgba, cell, light, dark), lut, fill, 2, 3, 40, 40, 2))


def test_every_element_is_written():
    out = np.full((6, 2, 40, 40, 3), np.nan, np.float32)
    patch_grid.cut_patches(np.zeros((41, 79, 3), np.uint8), TABLES["arithmetic"], (0, 0, 0), 3, out)
    assert not np.isnan(out).any()


def test_bad_arguments():
    img, lut = np.zeros((4, 4, 3), np.uint8), TABLES["arithmetic"]
    with pytest.raises(ValueError, match="rows of"):
        patch_grid.cut_patches(img, lut, (0, 0, 0), 4, np.empty((6, 2, 2, 3), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        patch_grid.cut_patches(img, lut, (0, 0, 0), 2, np.empty((4, 2, 2, 3), np.float64))
    with pytest.raises(ValueError, match="RGBA"):
        patch_grid.cut_patches(img, lut, (0, 0, 0), 2, np.empty((4, 2, 2, 3), np.float32), (8, 204, 153))
    with pytest.raises(ValueError, match="uint8"):
        patch_grid.cut_patches(img.astype(np.float32), lut, (0, 0, 0), 2, np.empty((4, 2, 2, 3), np.float32))
