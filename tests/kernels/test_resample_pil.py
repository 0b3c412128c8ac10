"""resample_pil against the real Pillow ``Image.resize``, bit for bit.

Every expected value comes from running Pillow on the same array; nothing is hard-coded.
Noise images are the hardest case (every rounding difference shows); gradients and
saturated blocks cover smooth content and clipping of the overshooting filters.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from sglang_mm_grpc.kernels import convolve_u8, resample_pil as rp

FILTERS = [rp.NEAREST, rp.LANCZOS, rp.BILINEAR, rp.BICUBIC, rp.BOX, rp.HAMMING]
NAMES = {rp.NEAREST: "NEAREST", rp.LANCZOS: "LANCZOS", rp.BILINEAR: "BILINEAR",
         rp.BICUBIC: "BICUBIC", rp.BOX: "BOX", rp.HAMMING: "HAMMING"}
CONV_FILTERS = FILTERS[1:]
KINDS = ("noise", "gradient", "blocks")


def make_image(rng: np.random.Generator, h: int, w: int, c: int, kind: str) -> np.ndarray:
    if kind == "noise":
        return rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    if kind == "gradient":
        y = np.linspace(0.0, 1.0, h)[:, None, None]
        x = np.linspace(0.0, 1.0, w)[None, :, None]
        fx, fy = rng.uniform(0.2, 3.0, 2)
        phase = rng.uniform(0.0, 2 * np.pi, (1, 1, c))
        v = 127.5 + 127.5 * np.sin(2 * np.pi * (fx * x + fy * y) + phase)
        return np.clip(np.rint(v), 0, 255).astype(np.uint8)
    # Saturated 0/255 blocks: sharp edges where Lanczos/bicubic over- and undershoot.
    bh, bw = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    cells = rng.integers(0, 2, (-(-h // bh), -(-w // bw), c), dtype=np.uint8) * 255
    return np.repeat(np.repeat(cells, bh, axis=0), bw, axis=1)[:h, :w]


def pil_resize(a: np.ndarray, out_h: int, out_w: int, f: int) -> np.ndarray:
    src = a[:, :, 0] if a.shape[2] == 1 else a  # (H, W) -> mode "L"
    out = np.asarray(Image.fromarray(np.ascontiguousarray(src)).resize((out_w, out_h), f))
    return out.reshape(out_h, out_w, a.shape[2])


def describe(a: np.ndarray, out_h: int, out_w: int, f: int, note: str = "") -> str:
    h, w, c = a.shape
    order = "h-first" if rp.horizontal_first(h, w, out_h, out_w) else "v-first"
    return f"{w}x{h}x{c} -> {out_w}x{out_h} {NAMES[f]} ({order}{', ' + note if note else ''})"


def mismatch(a: np.ndarray, out_h: int, out_w: int, f: int, note: str = "") -> str | None:
    """None if resize equals Pillow, else a line with size, filter and mismatch count."""
    ref = pil_resize(a, out_h, out_w, f)
    got = rp.resize(a, out_h, out_w, f)
    if got.shape != ref.shape or got.dtype != np.uint8:
        return f"{describe(a, out_h, out_w, f, note)}: got {got.dtype}{got.shape}, want {ref.shape}"
    bad = int(np.count_nonzero(got != ref))
    if bad:
        diff = int(np.abs(got.astype(np.int16) - ref.astype(np.int16)).max())
        return f"{describe(a, out_h, out_w, f, note)}: {bad}/{ref.size} samples differ, max |diff| {diff}"
    return None


def assert_all_match(cases) -> None:
    failures = [m for m in (mismatch(*case) for case in cases) if m]
    assert not failures, f"{len(failures)} mismatching case(s):\n" + "\n".join(failures[:30])


def random_sizes(rng: np.random.Generator, kind: str) -> tuple[int, int, int, int]:
    def down():
        i = int(rng.integers(2, 401))
        return i, int(rng.integers(1, i))

    def up():
        i = int(rng.integers(1, 201))
        return i, int(rng.integers(i + 1, 401))

    if kind == "down":
        (ih, oh), (iw, ow) = down(), down()
    elif kind == "up":
        (ih, oh), (iw, ow) = up(), up()
    elif kind == "width_only":
        (iw, ow), ih = (down() if rng.random() < 0.5 else up()), int(rng.integers(1, 200))
        oh = ih
    elif kind == "height_only":
        (ih, oh), iw = (down() if rng.random() < 0.5 else up()), int(rng.integers(1, 200))
        ow = iw
    elif kind == "mixed":
        (ih, oh), (iw, ow) = (down(), up()) if rng.random() < 0.5 else (up(), down())
    else:  # tiny
        ih, iw, oh, ow = (int(v) for v in rng.integers(1, 9, 4))
    return ih, iw, oh, ow


@pytest.mark.parametrize("f", FILTERS, ids=NAMES.get)
def test_random_cases(f):
    """70 seeded cases per filter over size kinds, content kinds and C=1/3."""
    rng = np.random.default_rng(1000 + f)
    size_kinds = ("down", "up", "width_only", "height_only", "mixed", "tiny")
    cases = []
    for i in range(70):
        ih, iw, oh, ow = random_sizes(rng, size_kinds[i % len(size_kinds)])
        c = 3 if i % 3 else 1
        kind = KINDS[(i // 2) % len(KINDS)]
        cases.append((make_image(rng, ih, iw, c, kind), oh, ow, f, f"{kind}, case {i}"))
    assert_all_match(cases)


@pytest.mark.parametrize("f", FILTERS, ids=NAMES.get)
def test_one_pixel_inputs_and_outputs(f):
    rng = np.random.default_rng(7)
    cases = []
    for c in (1, 3):
        px = make_image(rng, 1, 1, c, "noise")
        for oh, ow in [(1, 2), (2, 1), (5, 3), (17, 1), (1, 23), (64, 48), (300, 7)]:
            cases.append((px, oh, ow, f, "1x1 in"))
        for ih, iw in [(1, 2), (2, 1), (3, 5), (1, 400), (400, 1), (37, 61), (256, 300)]:
            cases.append((make_image(rng, ih, iw, c, "noise"), 1, 1, f, "1x1 out"))
        cases.append((make_image(rng, 9, 13, c, "gradient"), 1, 5, f, "1-row out"))
        cases.append((make_image(rng, 9, 13, c, "gradient"), 5, 1, f, "1-column out"))
    assert_all_match(cases)


@pytest.mark.parametrize("f", FILTERS, ids=NAMES.get)
def test_thin_images(f):
    rng = np.random.default_rng(11)
    cases = []
    for c in (1, 3):
        wide = make_image(rng, 1, 500, c, "noise")
        tall = make_image(rng, 500, 1, c, "noise")
        for oh, ow in [(1, 137), (1, 999), (3, 500), (2, 250), (1, 1)]:
            cases.append((wide, oh, ow, f, "1x500"))
            cases.append((tall, ow, oh, f, "500x1"))
    assert_all_match(cases)


@pytest.mark.parametrize("f", FILTERS, ids=NAMES.get)
def test_pass_order_both_ways(f):
    """Sizes on both sides of Pillow 13's vertical-first rule, including its boundary."""
    rng = np.random.default_rng(13)
    cases = []
    for i in range(16):
        iw = int(rng.integers(20, 300))
        ow = int(rng.integers(max(1, iw - 60), iw + 60))
        dw = iw - ow
        ih = int(rng.integers(max(2, 2 * dw + 2), 2 * max(dw, 1) + 300))
        v_first = (ih, iw, int(rng.integers(1, ih - max(2 * dw, 0))), ow)
        assert not rp.horizontal_first(*v_first), v_first
        # Height shrinking by exactly twice the width shrink stays horizontal-first.
        h_first = (ih, iw, ih - 2 * dw, ow) if 0 < 2 * dw < ih else (ih, iw, ih + 5, ow)
        assert rp.horizontal_first(*h_first), h_first
        for ih_, iw_, oh_, ow_ in (v_first, h_first):
            c = 3 if i % 2 else 1
            cases.append((make_image(rng, ih_, iw_, c, KINDS[i % 3]), oh_, ow_, f, "pass order"))
    assert_all_match(cases)


@pytest.mark.parametrize("f", FILTERS, ids=NAMES.get)
def test_large_ratios(f):
    rng = np.random.default_rng(17)
    cases = [
        (make_image(rng, 20, 3000, 3, "noise"), 20, 7, f, "3000->7 wide"),
        (make_image(rng, 3000, 20, 3, "noise"), 7, 20, f, "3000->7 tall"),
        (make_image(rng, 900, 1200, 3, "gradient"), 5, 9, f, "both axes"),
        (make_image(rng, 3, 4, 3, "noise"), 700, 900, f, "x200 upscale"),
        (make_image(rng, 2000, 1500, 1, "noise"), 3, 2, f, "L"),
    ]
    assert_all_match(cases)


@pytest.mark.parametrize(
    "ih,iw,oh,ow,f",
    [
        (1080, 1920, 1092, 1932, rp.BICUBIC),
        (1080, 1920, 448, 448, rp.BICUBIC),
        (3024, 4032, 966, 1288, rp.BICUBIC),
        (1080, 1920, 1092, 1932, rp.LANCZOS),
        (768, 1024, 384, 512, rp.BILINEAR),
        (1000, 800, 333, 801, rp.HAMMING),
        (1000, 800, 333, 801, rp.BOX),
        (480, 640, 1117, 1499, rp.NEAREST),
    ],
)
def test_large_images(ih, iw, oh, ow, f):
    rng = np.random.default_rng(ih * iw + f)
    assert_all_match([(make_image(rng, ih, iw, 3, "noise"), oh, ow, f, "large")])


@settings(max_examples=150, deadline=None)
@given(
    ih=st.integers(1, 160), iw=st.integers(1, 160),
    oh=st.integers(1, 160), ow=st.integers(1, 160),
    f=st.sampled_from(FILTERS), c=st.sampled_from([1, 3]),
    kind=st.sampled_from(KINDS), seed=st.integers(0, 2**32 - 1),
)
def test_hypothesis_sizes(ih, iw, oh, ow, f, c, kind, seed):
    a = make_image(np.random.default_rng(seed), ih, iw, c, kind)
    assert_all_match([(a, oh, ow, f, f"{kind}, seed {seed}")])


@pytest.mark.parametrize("f", FILTERS, ids=NAMES.get)
def test_alpha_modes(f):
    """LA / RGBA go through Pillow's premultiply -> resize -> unpremultiply."""
    rng = np.random.default_rng(19)
    cases = []
    for c in (2, 4):
        for ih, iw, oh, ow in [(37, 53, 19, 80), (64, 64, 17, 17), (5, 120, 9, 33), (1, 1, 3, 4)]:
            a = make_image(rng, ih, iw, c, "noise")
            a[..., -1][rng.random((ih, iw)) < 0.2] = 0
            a[..., -1][rng.random((ih, iw)) < 0.2] = 255
            cases.append((a, oh, ow, f, "alpha"))
    assert_all_match(cases)


def test_same_size_is_a_copy():
    a = make_image(np.random.default_rng(23), 31, 17, 3, "noise")
    for f in FILTERS:
        out = rp.resize(a, 31, 17, f)
        assert np.array_equal(out, a) and not np.shares_memory(out, a)


def test_non_contiguous_input_and_2d_input():
    rng = np.random.default_rng(29)
    base = make_image(rng, 90, 120, 3, "noise")
    view = base[5:80:2, ::-1]  # strided in both axes
    gray = make_image(rng, 70, 45, 1, "gradient")[:, :, 0]
    for f in FILTERS:
        assert np.array_equal(rp.resize(view, 50, 33, f), pil_resize(np.ascontiguousarray(view), 50, 33, f))
        got = rp.resize(gray, 31, 100, f)
        assert got.shape == (31, 100)
        assert np.array_equal(got, np.asarray(Image.fromarray(gray).resize((100, 31), f)))


@pytest.mark.parametrize("f", CONV_FILTERS, ids=NAMES.get)
def test_pass_kernels_compose_like_pillow(f):
    """The contract fused writers rely on: coeffs + resample_horizontal (with row0 and the
    shifted vertical bounds) + resample_vertical, in horizontal_first's order, is Pillow."""
    rng = np.random.default_rng(31 + f)
    failures = []
    for i in range(24):
        ih, iw, oh, ow = (int(v) for v in rng.integers(2, 180, 4))
        if ih == oh or iw == ow:
            continue  # Pillow skips an unchanged axis entirely
        c = 3 if i % 2 else 1
        a = make_image(rng, ih, iw, c, KINDS[i % 3])
        bh, kh = rp.coeffs(iw, ow, f)
        bv, kv = rp.coeffs(ih, oh, f)
        out = np.empty((oh, ow, c), np.uint8)
        if rp.horizontal_first(ih, iw, oh, ow):
            first, last = int(bv[0, 0]), int(bv[-1, 0] + bv[-1, 1])
            tmp = np.empty((last - first, ow, c), np.uint8)
            rp.resample_horizontal(a, tmp, first, bh, kh)
            bv[:, 0] -= first
            rp.resample_vertical(tmp, out, bv, kv)
        else:
            tmp = np.empty((oh, iw, c), np.uint8)
            rp.resample_vertical(a, tmp, bv, kv)
            rp.resample_horizontal(tmp, out, 0, bh, kh)
        ref = pil_resize(a, oh, ow, f)
        if not np.array_equal(out, ref):
            failures.append(f"{describe(a, oh, ow, f)}: {int(np.count_nonzero(out != ref))} differ")
    assert not failures, "\n".join(failures)


def test_pass_kernels_accept_strided_arrays():
    rng = np.random.default_rng(37)
    a = make_image(rng, 40, 60, 3, "noise")
    bh, kh = rp.coeffs(50, 23, rp.BICUBIC)
    bv, kv = rp.coeffs(30, 11, rp.LANCZOS)
    src = a[::-1, 5:55]  # 40x50, negative row stride
    want = np.empty((40, 23, 3), np.uint8)
    rp.resample_horizontal(np.ascontiguousarray(src), want, 0, bh, kh)
    big = np.zeros((40, 30, 3), np.uint8)
    rp.resample_horizontal(src, big[:, 3:26], 0, bh, kh)
    assert np.array_equal(big[:, 3:26], want) and not big[:, :3].any() and not big[:, 26:].any()
    # row0 offsets the source rows read.
    part = np.empty((10, 23, 3), np.uint8)
    rp.resample_horizontal(src, part, 7, bh, kh)
    assert np.array_equal(part, want[7:17])
    src_v = a[5:35, ::2]  # 30x30, strided columns
    want_v = np.empty((11, 30, 3), np.uint8)
    rp.resample_vertical(np.ascontiguousarray(src_v), want_v, bv, kv)
    big_v = np.zeros((11, 40, 3), np.uint8)
    rp.resample_vertical(src_v, big_v[:, ::-1][:, 5:35], bv, kv)
    assert np.array_equal(big_v[:, ::-1][:, 5:35], want_v)


@pytest.mark.parametrize("f", CONV_FILTERS, ids=NAMES.get)
def test_coeffs_layout(f):
    for in_size, out_size in [(1, 1), (1, 9), (9, 1), (100, 37), (37, 100), (4000, 7), (4000, 3999)]:
        bounds, kk = rp.coeffs(in_size, out_size, f)
        assert bounds.dtype == np.int32 and kk.dtype == np.int32
        assert bounds.shape == (out_size, 2) and kk.shape[0] == out_size
        xmin, n = bounds[:, 0], bounds[:, 1]
        assert (xmin >= 0).all() and (n >= 1).all() and (xmin + n <= in_size).all()
        assert (n <= kk.shape[1]).all()
        taps = np.arange(kk.shape[1])[None, :]
        assert not kk[taps >= n[:, None]].any()  # zero past each row's tap count
        sums = kk.sum(axis=1, dtype=np.int64)
        assert (np.abs(sums - (1 << 22)) <= n).all()  # weights normalised before rounding


def test_coeffs_returns_private_arrays():
    a = make_image(np.random.default_rng(41), 50, 60, 3, "noise")
    before = rp.resize(a, 21, 33, rp.BICUBIC)
    bounds, kk = rp.coeffs(50, 21, rp.BICUBIC)
    bounds[:] = 0
    kk[:] = 0
    assert np.array_equal(rp.resize(a, 21, 33, rp.BICUBIC), before)
    assert rp.coeffs(50, 21, rp.BICUBIC)[1].any()


def test_rejects_bad_arguments():
    a = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError):
        rp.resize(np.zeros((4, 4, 5), np.uint8), 2, 2, rp.BICUBIC)
    with pytest.raises(ValueError):
        rp.resize(a.astype(np.float32), 2, 2, rp.BICUBIC)
    with pytest.raises(ValueError):
        rp.resize(a, 0, 2, rp.BICUBIC)
    with pytest.raises(ValueError):
        rp.resize(a, 2, 2, 6)  # MKS2013: not supported
    with pytest.raises(ValueError):
        rp.coeffs(10, 5, rp.NEAREST)


def test_warmup_runs():
    rp.warmup()


@pytest.mark.parametrize("f", CONV_FILTERS, ids=NAMES.get)
def test_every_channel_count_and_tap_count(f):
    """All channel counts through resize, at scales giving 1 to ~20 taps per axis (the pass
    kernels take taps in chunks of four, and RGB/RGBA move pixels as 4-byte slots)."""
    rng = np.random.default_rng(43 + f)
    cases = []
    for i in range(32):
        c = 1 + i % 4
        scale_h, scale_w = (float(v) for v in rng.uniform(0.2, 7.0, 2))
        ih, iw = (int(v) for v in rng.integers(2, 120, 2))
        oh, ow = max(1, round(ih / scale_h)), max(1, round(iw / scale_w))
        if (oh, ow) == (ih, iw):
            ow += 1
        a = make_image(rng, ih, iw, c, KINDS[i % 3])
        if c in (2, 4):
            a[..., -1][rng.random((ih, iw)) < 0.3] = 255
        cases.append((a, oh, ow, f, f"taps, case {i}"))
    assert_all_match(cases)


def _reference_pass(src, bounds, kk, axis):
    """The pass kernels' contract in numpy, with Resample.c's int32 wrap-around."""
    out = []
    for o, (xmin, n) in enumerate(bounds):
        taps = np.moveaxis(np.take(src.astype(np.int64), np.arange(xmin, xmin + n), axis=axis), axis, 0)
        acc = (1 << 21) + np.tensordot(kk[o, :n].astype(np.int64), taps, axes=1)
        acc = ((acc + 2**31) % 2**32 - 2**31) >> 22  # wrap to int32, then shift
        out.append(np.clip(acc, 0, 255).astype(np.uint8))
    return np.stack(out, axis=axis)


def _wrapping_taps(rng, in_size: int, out_size: int):
    """Random bounds of 1..13 taps inside the axis, with weights so large that sums
    overflow int32."""
    bounds = np.empty((out_size, 2), np.int32)
    bounds[:, 1] = rng.integers(1, 14, out_size).clip(1, in_size)
    bounds[:, 0] = [rng.integers(0, in_size - n + 1) for n in bounds[:, 1]]
    kk = np.zeros((out_size, 13), np.int32)
    for i, n in enumerate(bounds[:, 1]):
        kk[i, :n] = rng.integers(-(2**26), 2**26, n)
    return bounds, kk


@pytest.mark.parametrize("nc", [1, 2, 3, 4])
def test_pass_kernels_wrap_like_int32(nc):
    """Weights large enough that sums overflow int32: the result wraps like Resample.c's
    ``int ss`` for every channel count, tap count and both passes."""
    rng = np.random.default_rng(47 + nc)
    for ih, iw, oh, ow in [(40, 50, 23, 61), (31, 9, 7, 3), (64, 70, 64, 17)]:
        a = rng.integers(0, 256, (ih, iw, nc), dtype=np.uint8)
        bh, kh = _wrapping_taps(rng, iw, ow)
        got = np.empty((ih, ow, nc), np.uint8)
        rp.resample_horizontal(a, got, 0, bh, kh)
        assert np.array_equal(got, _reference_pass(a, bh, kh, 1))
        bv, kv = _wrapping_taps(rng, ih, oh)
        got = np.empty((oh, iw, nc), np.uint8)
        rp.resample_vertical(a, got, bv, kv)
        assert np.array_equal(got, _reference_pass(a, bv, kv, 0))


def test_pass_kernels_take_any_int32_weights():
    """The passes compute taps in int16 halves of each weight where the weights allow it
    (``convolve_u8.pairable``) and in int32 otherwise: weights past 2**26, and more taps than the
    halves' sums hold (a shrink by thousands), give Resample.c's int32 results too."""
    rng = np.random.default_rng(5)
    for nc in (1, 3, 4):
        a = rng.integers(0, 256, (70, 90, nc), dtype=np.uint8)
        bh, kh = _wrapping_taps(rng, 90, 33)
        kh[:, 0] = 2**30 + 12345  # high half beyond int16
        got = np.empty((70, 33, nc), np.uint8)
        rp.resample_horizontal(a, got, 0, bh, kh)
        assert np.array_equal(got, _reference_pass(a, bh, kh, 1))
        bv, kv = _wrapping_taps(rng, 70, 21)
        kv[:, 0] = -(2**29)
        got = np.empty((21, 90, nc), np.uint8)
        rp.resample_vertical(a, got, bv, kv)
        assert np.array_equal(got, _reference_pass(a, bv, kv, 0))
    wide = rng.integers(0, 256, (3, 9000, 3), dtype=np.uint8)
    tall = np.ascontiguousarray(wide.transpose(1, 0, 2))
    for f in CONV_FILTERS:
        want = np.asarray(Image.fromarray(wide).resize((2, 3), f, reducing_gap=None))
        assert np.array_equal(rp.resize(wide, 3, 2, f), want), NAMES[f]
        want = np.asarray(Image.fromarray(tall).resize((3, 2), f, reducing_gap=None))
        assert np.array_equal(rp.resize(tall, 2, 3, f), want), NAMES[f]


@pytest.mark.parametrize("shift", [0, 6, 11, 22])
def test_pass_kernels_take_shifted_int16_weights(shift):
    """Weights that are int16 values shifted left by a common amount (torch's int16
    weights in 22 bits) take one multiply-add a pair of taps (``convolve_u8.split_pairs``'s
    single mode); the results equal Resample.c's int32 sums, wrap-around included, for both
    passes, every channel count and RGBX."""
    rng = np.random.default_rng(61 + shift)
    for nc, sp in ((1, 1), (3, 3), (3, 4), (4, 4)):
        a = rng.integers(0, 256, (70, 90, sp), dtype=np.uint8)
        for axis, (size, out) in enumerate(((70, 23), (90, 41))):
            bounds, _ = _wrapping_taps(rng, size, out)
            kk = np.zeros((out, 13), np.int32)
            for i, n in enumerate(bounds[:, 1]):
                kk[i, :n] = (rng.integers(-32768, 32768, n) << shift).astype(np.int32)  # wraps past 2**31
            assert convolve_u8.split_pairs(bounds, kk)[2] == shift or not kk.any()
            shape = (out, 90, nc) if axis == 0 else (70, out, nc)
            got = np.empty(shape, np.uint8)
            if axis == 0:
                rp.resample_vertical(a, got, bounds, kk)
            else:
                rp.resample_horizontal(a, got, 0, bounds, kk)
            want = _reference_pass(a, bounds, kk, axis)[..., :nc]
            assert np.array_equal(got, want), (nc, sp, axis)


def test_torch_weights_take_the_single_mode():
    """torchvision's antialiased weights are int16 in 22 bits: the single mode."""
    from sglang_mm_grpc.kernels import resample_tv

    for mode in ("bilinear", "bicubic"):
        for i, o in ((640, 336), (1920, 1680), (300, 310)):
            bounds, kk = resample_tv.coeffs(i, o, mode)
            assert convolve_u8.split_pairs(bounds, kk)[2] >= 0
    bounds, kk = rp.coeffs(640, 336, rp.BICUBIC)
    assert convolve_u8.split_pairs(bounds, kk)[2] == -1  # Pillow's 22-bit weights: int16 halves


def _rgbx(rgb: np.ndarray, pad: int) -> np.ndarray:
    """Pillow's own RGB layout: a fourth, ignored byte per pixel."""
    out = np.full((*rgb.shape[:2], 4), pad, np.uint8)
    out[:, :, :3] = rgb
    return out


@pytest.mark.parametrize("f", FILTERS, ids=NAMES.get)
def test_resize_rgb_reads_rgbx_like_pillow_resizes_rgb(f):
    """Every pass order and axis case (both, width only, height only, neither), with
    padding bytes of 0 and 255 that must never leak into the result."""
    rng = np.random.default_rng(11 + f)
    cases = [(37, 53, 20, 31), (300, 40, 30, 38), (40, 300, 38, 30), (37, 53, 37, 20), (37, 53, 20, 53),
             (37, 53, 37, 53), (1, 9, 3, 2), (9, 1, 2, 3), (64, 64, 200, 150),
             (20, 2100, 11, 2100)]  # height only, in several row blocks and a short last one
    for ih, iw, oh, ow in cases:
        for kind in KINDS:
            rgb = make_image(rng, ih, iw, 3, kind)
            want = pil_resize(rgb, oh, ow, f)
            for pad in (0, 255):
                got = rp.resize_rgb(_rgbx(rgb, pad), oh, ow, f)
                assert got.shape == want.shape and got.flags.c_contiguous, describe(rgb, oh, ow, f, kind)
                assert np.array_equal(got, want), describe(rgb, oh, ow, f, f"{kind}, RGBX pad {pad}")
            assert np.array_equal(rp.resize_rgb(rgb, oh, ow, f), want)


def test_resize_rgb_rejects_other_layouts():
    for bad in (np.zeros((4, 4, 2), np.uint8), np.zeros((4, 4), np.uint8), np.zeros((4, 4, 4), np.float32)):
        with pytest.raises(ValueError, match="RGBX"):
            rp.resize_rgb(bad, 2, 2, rp.BICUBIC)


@pytest.mark.parametrize("c", [3, 4])
def test_two_sizes_from_one_read_equal_two_resizes(c):
    """Two sizes whose horizontal passes read the same source rows share them; any pair
    (one axis kept, vertical first, other rows) falls back to two resizes: Pillow's
    results either way, for RGB and RGBX."""
    rng = np.random.default_rng(23 + c)
    for ih, iw, size_a, size_b in [(300, 400, (336, 336), (252, 336)), (480, 640, (336, 336), (504, 672)),
                                   (90, 300, (90, 40), (30, 120)), (400, 90, (40, 60), (100, 90)),
                                   (500, 700, (60, 650), (480, 20)), (33, 45, (7, 9), (70, 90))]:
        rgb = rng.integers(0, 256, (ih, iw, 3), dtype=np.uint8)
        px = rgb if c == 3 else _rgbx(rgb, 77)
        for f in CONV_FILTERS + [rp.NEAREST]:
            got = rp.resize_rgb_two(px, size_a, size_b, f)
            for size, image in zip((size_a, size_b), got):
                want = np.asarray(Image.fromarray(rgb).resize(size[::-1], f, reducing_gap=None))
                assert np.array_equal(image, want), (ih, iw, size, NAMES[f])
