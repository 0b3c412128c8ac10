"""The horizontal pass on AMX tiles (``kernels/resample_amx.py``) against the real Pillow, bit for bit.

AMX is a setting of the whole process (``amx.request``), so the checks run in a child
process that asks for it, as the server does; this test process keeps the AVX-512 path
that the rest of the suite checks. Every expected value comes from Pillow's ``resize`` on
the same pixels. Skipped where the CPU or the kernel gives no AMX tiles.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from servers import REPO
from sglang_mm_grpc.kernels import resample_amx as ra, resample_pil as rp

CHILD = r"""
import json, sys
import numpy as np
from PIL import Image
from sglang_mm_grpc.kernels import amx, resample_amx as ra, resample_pil as rp

granted = amx.request()
cases = json.loads(sys.argv[1])
rng = np.random.default_rng(7)
results = []
for w, h, ow, oh, filt, kind in cases:
    if kind == "noise":
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    else:  # saturated blocks: the overshooting filters clip
        img = np.repeat(np.repeat(rng.integers(0, 2, (h // 3 + 1, w // 5 + 1, 3), dtype=np.uint8) * 255, 3, 0), 5, 1)
        img = np.ascontiguousarray(img[:h, :w])
    pil = Image.fromarray(img)
    rgbx = np.asarray(pil.convert("RGBA")).copy()
    rgbx[:, :, 3] = rng.integers(0, 256, (h, w), dtype=np.uint8)  # padding bytes must not leak in
    ref = np.asarray(pil.resize((ow, oh), filt))
    got = rp.resize_rgb(rgbx, oh, ow, filt)
    bh, kh = rp.coeffs(w, ow, filt)
    on_amx = bool(granted and oh >= ra.MIN_ROWS and ra.pays(bh) and ra.plan(bh, kh, w)[0].size)
    results.append({"case": [w, h, ow, oh, filt, kind], "equal": bool(np.array_equal(ref, got)), "amx": on_amx})
# two widths from the same rows (LLaVA-NeXT's base image and its grid), as the family calls it
two = []
for w, h, a, b in ((1920, 1080, (378, 672), (336, 336)), (1366, 768, (336, 598), (336, 336)), (333, 297, (140, 60), (130, 35)),
                   (640, 480, (504, 672), (336, 336)), (640, 480, (336, 336), (504, 672))):
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    pil = Image.fromarray(img)
    got_a, got_b = rp.resize_rgb_two(np.asarray(pil.convert("RGBA")), a, b, Image.BICUBIC)
    two.append(bool(np.array_equal(np.asarray(pil.resize(a[::-1], Image.BICUBIC)), got_a)
                    and np.array_equal(np.asarray(pil.resize(b[::-1], Image.BICUBIC)), got_b)))
print(json.dumps({"granted": granted, "results": results, "two": two}))
"""

BICUBIC, LANCZOS, BILINEAR, HAMMING, BOX = rp.BICUBIC, rp.LANCZOS, rp.BILINEAR, rp.HAMMING, rp.BOX
CASES = [
    # LLaVA-NeXT's shrinks of a 1080p photo, and other sizes of the photo presets
    (1920, 1080, 672, 378, BICUBIC, "noise"), (1920, 1080, 336, 336, BICUBIC, "noise"),
    (4032, 3024, 672, 504, BICUBIC, "noise"), (1024, 768, 336, 336, BICUBIC, "blocks"),
    # every convolution filter, with and without negative lobes
    (900, 200, 300, 200, LANCZOS, "blocks"), (900, 200, 301, 133, LANCZOS, "noise"),
    (900, 200, 299, 130, BILINEAR, "noise"), (900, 200, 200, 140, HAMMING, "noise"),
    (900, 200, 90, 128, BOX, "blocks"),
    # row counts around the 16-row blocks (the last block overlaps), widths around the
    # five-output bands and the 16-pixel runs, the last run clamped to the row's end
    (100, 128, 33, 128, BICUBIC, "noise"), (100, 129, 33, 129, BICUBIC, "noise"), (100, 143, 34, 143, BICUBIC, "noise"),
    (100, 159, 35, 159, BICUBIC, "blocks"), (16, 140, 5, 130, BICUBIC, "noise"), (17, 140, 6, 128, LANCZOS, "noise"),
    (37, 130, 7, 130, BICUBIC, "noise"), (3000, 130, 11, 129, BICUBIC, "noise"), (4000, 128, 1, 128, LANCZOS, "noise"),
    (640, 480, 213, 160, BICUBIC, "noise"), (641, 479, 214, 161, LANCZOS, "blocks"),
    # fewer rows than pay for a plan: int16 pairs
    (100, 40, 33, 40, BICUBIC, "noise"), (1920, 127, 672, 127, BICUBIC, "noise"),
]


@pytest.fixture(scope="module")
def child() -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True, text=True, timeout=900,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    if not got["granted"]:
        pytest.skip("no AMX tiles here (CPU or kernel)")
    return got


def test_amx_resizes_equal_pillow(child):
    wrong = [r["case"] for r in child["results"] if not r["equal"]]
    assert not wrong, wrong


def test_the_cases_ran_on_amx_where_they_shrink(child):
    """Every case here shrinks its rows with 5 taps or more, so all ran on tiles (else this
    file would check the AVX-512 path twice), but the two with fewer rows than
    ``resample_amx.MIN_ROWS``."""
    assert [r["case"][:4] for r in child["results"] if not r["amx"]] == [[100, 40, 33, 40], [1920, 127, 672, 127]]


def test_two_widths_at_once_equal_pillow(child):
    """Both widths on tiles, and one on tiles with the other (504 rows, an upscale) on
    int16 pairs, either way round."""
    assert child["two"] == [True] * 5


def test_upscales_stay_on_int16_pairs():
    assert not ra.pays(rp.coeffs(1920, 1932, BICUBIC)[0])
    assert not ra.pays(rp.coeffs(640, 672, BICUBIC)[0])
    assert ra.pays(rp.coeffs(1920, 1600, BICUBIC)[0]) and ra.pays(rp.coeffs(1920, 672, BICUBIC)[0])


@pytest.mark.parametrize("filt", [BICUBIC, LANCZOS, BILINEAR, HAMMING, BOX])
def test_weights_split_into_three_signed_bytes_exactly(filt):
    """The plan's weight tiles recombine (b0 + b1 * 256 + b2 * 65536) to Pillow's 22-bit
    weights, each in the tile row of its source pixel and the column of its output and
    channel, and nothing else is set."""
    for w, ow in ((1920, 672), (101, 7), (4000, 3), (500, 251)):
        bounds, kk = rp.coeffs(w, ow, filt)
        runs, starts, weights = ra.plan(bounds, kk, w)
        tiles = weights.astype(np.int64)
        whole = tiles[:, :, 0] + tiles[:, :, 1] * 256 + tiles[:, :, 2] * 65536  # [band, run, 1024]
        seen = np.zeros_like(whole, dtype=bool)
        for o in range(ow):
            band, j = divmod(o, 5)
            for i in range(bounds[o, 1]):
                px = bounds[o, 0] + i
                k = next(k for k in range(runs[band]) if starts[band, k] // 4 <= px < starts[band, k] // 4 + 16)
                for c in range(3):
                    at = (px - starts[band, k] // 4) * 64 + 4 * (3 * j + c) + c
                    assert whole[band, k, at] == kk[o, i]
                    seen[band, k, at] = True
        assert not whole[~seen].any()
        assert (starts // 4 + 16 <= w).all() and (starts >= 0).all()


def test_no_band_plan_for_rows_under_one_run():
    bounds, kk = rp.coeffs(15, 5, BICUBIC)
    assert ra.plan(bounds, kk, 15)[0].size == 0

