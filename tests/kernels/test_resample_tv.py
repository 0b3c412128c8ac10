"""resample_tv against torch/torchvision, bit for bit.

Without torch (CI) every committed fixture case (``tests/fixtures/resample_tv.json``,
written by ``scripts/gen_fixtures.py``) is recomputed and compared. With torch, hundreds
more random sizes run against the real ``tvF.resize``, and the first cases of the set are
regenerated to prove the committed file still describes the installed torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import fixtures
from sglang_mm_grpc.kernels import resample_pil, resample_tv

MODES = ["bilinear", "bicubic", "lanczos"]


def ours(img: np.ndarray, params: dict) -> np.ndarray:
    if params["mode"] == "nearest-exact":
        return resample_tv.resize_nearest_exact_u8(img, params["out_h"], params["out_w"])
    return resample_tv.resize_aa_u8(img, params["out_h"], params["out_w"], params["mode"])


# -- committed fixtures (no torch needed) ---------------------------------------------------


@pytest.mark.parametrize("case", fixtures.params("resample_tv"))
def test_fixture_u8(case):
    out = ours(fixtures.case_input(case), case["params"])
    fixtures.assert_output(out, case["outputs"]["out"], case["id"])


def test_fixture_sets_cover_every_mode():
    modes = {c["params"]["mode"] for c in fixtures.cases("resample_tv")}
    assert modes == {*MODES, "nearest-exact"}
    assert any(c["input"]["channels"] == 1 for c in fixtures.cases("resample_tv"))


# -- properties that need no reference ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_coeffs_are_torch_weights_in_pillow_layout(mode):
    for in_size, out_size in [(7, 3), (3, 7), (1000, 13), (13, 1000), (1, 5), (640, 641)]:
        bounds, kk16, p = resample_tv.coeffs_int16(in_size, out_size, mode)
        b22, kk22 = resample_tv.coeffs(in_size, out_size, mode)
        assert np.array_equal(bounds, b22) and 0 < p <= 22
        assert np.array_equal(kk22, kk16 << (resample_pil.PRECISION_BITS - p))
        assert np.abs(kk16).max() < 1 << 15  # int16 in torch
        sums = kk16.sum(axis=1)
        assert np.all(np.abs(sums - (1 << p)) <= kk16.shape[1])  # normalized before rounding


def test_channels_are_independent_and_2d_is_one_channel():
    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    for mode in MODES:
        rgb = resample_tv.resize_aa_u8(img, 20, 71, mode)
        for c in range(3):
            assert np.array_equal(resample_tv.resize_aa_u8(img[:, :, c], 20, 71, mode), rgb[:, :, c])
            assert np.array_equal(resample_tv.resize_aa_u8(img[:, :, c:c + 1], 20, 71, mode), rgb[:, :, c:c + 1])
    rgba = rng.integers(0, 256, (9, 11, 4), dtype=np.uint8)  # no premultiplying: plain channels
    four = resample_tv.resize_aa_u8(rgba, 5, 16, "bicubic")
    assert np.array_equal(four[:, :, :3], resample_tv.resize_aa_u8(np.ascontiguousarray(rgba[:, :, :3]), 5, 16, "bicubic"))


def test_same_size_is_a_copy_and_strided_input_is_fine():
    rng = np.random.default_rng(8)
    img = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    out = resample_tv.resize_aa_u8(img, 30, 40)
    assert np.array_equal(out, img) and out is not img
    view = img[::2, 1::3]
    assert np.array_equal(resample_tv.resize_aa_u8(view, 9, 8), resample_tv.resize_aa_u8(view.copy(), 9, 8))
    assert np.array_equal(resample_tv.resize_nearest_exact_u8(view, 9, 8),
                          resample_tv.resize_nearest_exact_u8(view.copy(), 9, 8))


def test_bad_arguments():
    img = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError, match="unknown mode"):
        resample_tv.resize_aa_u8(img, 2, 2, "box")
    with pytest.raises(ValueError):
        resample_tv.resize_aa_u8(img.astype(np.float32), 2, 2)
    with pytest.raises(ValueError):
        resample_tv.resize_aa_u8(img, 0, 2)
    with pytest.raises(ValueError):
        resample_tv.resize_aa_u8(np.zeros((4, 4, 5), np.uint8), 2, 2)


# -- against the real torch -----------------------------------------------------------------


@pytest.fixture(scope="module")
def gen():
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    return fixtures.generator()


def _sizes(seed: int, n: int, top: int):
    rng = np.random.default_rng(seed)
    for k in range(n):
        h, w, oh, ow = (int(v) for v in rng.integers(1, top + 1, 4))
        if k % 7 == 0:
            oh = h
        elif k % 7 == 1:
            ow = w
        elif k % 7 == 2:  # big downscale
            h, w, oh, ow = h * 9, w * 7, max(1, oh // 4), max(1, ow // 4)
        if (oh, ow) == (1, 1):
            ow = 2  # torch 2.14 asserts on uint8 aa resizes to 1x1
        yield k, h, w, oh, ow


@pytest.mark.parametrize("mode", MODES)
def test_against_torch_random_sizes(gen, mode):
    """100 random sizes per mode (up, down, one axis, big factors), noise and smooth, 3 and 1 channels."""
    bad = []
    for k, h, w, oh, ow in _sizes({"bilinear": 11, "bicubic": 12, "lanczos": 13}[mode], 100, 160):
        channels = 1 if k % 4 == 0 else 3
        img = fixtures.imagegen.pixels(h, w, seed=k, kind="noise" if k % 3 else "smooth", channels=channels)
        ref = gen.tv_resize_u8(img, oh, ow, mode)
        got = resample_tv.resize_aa_u8(img, oh, ow, mode)
        if not np.array_equal(got, ref):
            bad.append(f"{h}x{w}x{channels} -> {oh}x{ow}: {int(np.count_nonzero(got != ref))} differ")
    assert not bad, "\n".join(bad)


def test_against_torch_nearest_exact(gen):
    bad = []
    for k, h, w, oh, ow in _sizes(14, 100, 300):
        img = fixtures.imagegen.pixels(h, w, seed=k)
        if not np.array_equal(resample_tv.resize_nearest_exact_u8(img, oh, ow), gen.tv_resize_u8(img, oh, ow, "nearest-exact")):
            bad.append(f"{h}x{w} -> {oh}x{ow}")
    assert not bad, bad


def test_large_downscale_against_torch(gen):
    """A photo-sized input to a few hundred pixels: many taps per output pixel, p < 14."""
    img = fixtures.imagegen.pixels(1500, 2000, seed=5, kind="smooth")
    for mode in MODES:
        assert np.array_equal(resample_tv.resize_aa_u8(img, 308, 420, mode), gen.tv_resize_u8(img, 308, 420, mode))


def test_committed_fixtures_match_installed_torch(gen):
    """The generator, rerun on the first cases, reproduces the committed file."""
    fresh = gen.generate("resample_tv", limit=25)["cases"]
    assert fresh == fixtures.cases("resample_tv")[: len(fresh)]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "lanczos"])
def test_resize_rgb_reads_rgbx_like_packed_rgb(mode):
    """The RGBX entry (Pillow's buffer read in place) gives what ``resize_aa_u8`` (checked
    against torchvision above) gives for the packed pixels; padding never leaks in."""
    rng = np.random.default_rng(5)
    for ih, iw, oh, ow in [(37, 53, 20, 31), (37, 53, 37, 20), (37, 53, 20, 53), (37, 53, 37, 53), (40, 30, 90, 70),
                           (20, 2100, 11, 2100)]:  # height only, in several row blocks
        rgb = rng.integers(0, 256, (ih, iw, 3), dtype=np.uint8)
        want = resample_tv.resize_aa_u8(rgb, oh, ow, mode)
        for pad in (0, 255):
            rgbx = np.full((ih, iw, 4), pad, np.uint8)
            rgbx[:, :, :3] = rgb
            got = resample_tv.resize_rgb(rgbx, oh, ow, mode)
            assert got.shape == (oh, ow, 3) and np.array_equal(got, want), (ih, iw, oh, ow, pad)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "lanczos", "nearest-exact"])
def test_two_sizes_from_one_read_equal_two_resizes(mode):
    """A model's tiles and its thumbnail from one image: the shared horizontal pass gives
    what two ``resize_rgb`` calls give, RGB and RGBX, shared or not."""
    rng = np.random.default_rng(8)
    for ih, iw, size_a, size_b in [(300, 400, (336, 672), (336, 336)), (768, 1024, (1008, 1344), (336, 336)),
                                   (50, 70, (50, 30), (20, 20)), (31, 200, (90, 150), (5, 7))]:
        rgb = rng.integers(0, 256, (ih, iw, 3), dtype=np.uint8)
        rgbx = np.full((ih, iw, 4), 9, np.uint8)
        rgbx[:, :, :3] = rgb
        want = [resample_tv.resize_rgb(rgb, *size, mode) for size in (size_a, size_b)]
        for px in (rgb, rgbx):
            got = resample_tv.resize_rgb_two(px, size_a, size_b, mode)
            assert all(np.array_equal(g, w) for g, w in zip(got, want)), (ih, iw, size_a, size_b, mode)
