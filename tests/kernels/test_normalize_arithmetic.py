"""The writers' arithmetic path against their table lookup path, bit for bit.

``normalize.arithmetic`` fits constants per table; the writers then compute instead of
looking up. For every preset's statistics, random ones, each step switched off and
every table builder, the fitted arithmetic (or, when nothing fits, the lookup) must
write exactly the values of the lookup path.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pytest

from sglang_mm_grpc.kernels import bf16, chw, normalize, patchify, totensor, window

PRESETS = Path(__file__).resolve().parents[2] / "sglang_mm_grpc" / "config" / "presets"


def _stats():
    seen = {}
    for path in sorted(glob.glob(str(PRESETS / "*.json"))):
        p = json.loads(Path(path).read_text())
        if "image_mean" in p:
            key = (tuple(p["image_mean"]), tuple(p["image_std"]), p.get("rescale_factor", 1 / 255))
            seen[key] = Path(path).stem
    rng = np.random.default_rng(7)
    for i in range(6):
        seen[(tuple(rng.uniform(0, 1, 3)), tuple(rng.uniform(0.05, 2, 3)), 1 / 255)] = f"random{i}"
    seen[((0.1, 0.9, 0.33), (0.7, 0.01, 1.3), 0.01)] = "odd factor"
    return [pytest.param(*k, id=v) for k, v in seen.items()]


def _tables(mean, std, factor):
    for name, build in (("pil", normalize.pil_backend_lut), ("tv", normalize.torchvision_backend_lut),
                        ("bf16", bf16.bf16_backend_lut)):
        for do_rescale in (True, False):
            for do_normalize in (True, False):
                if name == "bf16" and do_normalize and not do_rescale:
                    continue
                yield f"{name}-{do_rescale:d}{do_normalize:d}", build(mean, std, factor, do_rescale, do_normalize)
    yield "totensor", totensor.totensor_normalize_lut(mean, std)


def _same(a, b):
    return np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


IMG = np.random.default_rng(0).integers(0, 256, (56, 84, 3), dtype=np.uint8)
IMG[0, :, :] = np.arange(84 * 3).reshape(84, 3) % 256  # every value in every channel
IMG[1, :, :] = (np.arange(84 * 3).reshape(84, 3) + 252) % 256


@pytest.mark.parametrize("mean,std,factor", _stats())
def test_arithmetic_writers_equal_lookup(mean, std, factor):
    gather = np.empty((0, 4), np.float32)
    for name, lut in _tables(mean, std, factor):
        coef = normalize.arithmetic(lut)
        v = np.arange(256, dtype=np.float32)
        if coef.shape in ((3, 4), (3, 5)):  # (3, 5): 1 / std beside, for the corrected multiplication
            for c in range(3):
                h, lo, m, s = coef[c, :4]
                assert _same((v * h + v * lo - m) / s, lut[c]), name
                assert coef.shape == (3, 4) or _same(coef[c, 4], np.float32(1) / s), name
        elif coef.shape == (3, 3):  # the bfloat16 chain
            for c in range(3):
                f, m, r = coef[c]
                assert _same(bf16.round_bf16(bf16.round_bf16(bf16.round_bf16(v * f) - m) * r), lut[c]), name
        else:
            assert coef.shape == (0, 4), name
        fast = np.empty((3, 56, 84), np.float32)
        slow = np.empty_like(fast)
        chw.lut_chw(IMG, coef, lut, fast)
        chw.lut_chw(IMG, gather, lut, slow)
        assert _same(fast, slow) and _same(slow[:, 0], lut[np.arange(3)[:, None], IMG[0].T]), name
        tiles = np.empty((2, 4, 3, 40, 40), np.float32)
        window.lut_tiles_chw(IMG, 5, 3, 2, 2, coef, lut, np.array([1, 2, 3], np.uint8), tiles[0])
        window.lut_tiles_chw(IMG, 5, 3, 2, 2, gather, lut, np.array([1, 2, 3], np.uint8), tiles[1])
        assert _same(tiles[0], tiles[1]), name
        rows = np.empty((2, 24, 3 * 2 * 14 * 14), np.float32)
        kernel = patchify._specialized(14, 2, 2)[0]
        kernel(IMG, coef, lut, rows[0])
        kernel(IMG, gather, lut, rows[1])
        assert _same(rows[0], rows[1]), name


def test_which_tables_fit():
    """The HF tables fit, their divisions done as multiplications by 1 / std corrected by
    the residual (two fused multiply-adds); bf16-rounded ones fit the bfloat16 chain (its division as a
    multiplication, checked on all 256 values); a rescale by 0.01 is looked up (1/255
    times a power of two fits)."""
    clip = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
    for lut in (normalize.pil_backend_lut(*clip), normalize.torchvision_backend_lut(*clip),
                totensor.totensor_normalize_lut(*clip), normalize.pil_backend_lut(*clip, do_normalize=False),
                normalize.torchvision_backend_lut(*clip, do_normalize=False),
                bf16.bf16_backend_lut(*clip, 1 / 255, True, False)):
        assert normalize.arithmetic(lut).shape == (3, 5)  # each division a corrected multiplication
    half = normalize.arithmetic(bf16.bf16_backend_lut((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
    assert half.shape == (3, 3) and np.array_equal(half[:, 2], [2, 2, 2])
    for stats in (clip, ((0.2, 0.3, 0.4), (0.25, 1.0, 2.0))):
        assert normalize.arithmetic(bf16.bf16_backend_lut(*stats)).shape == (3, 3)
    assert normalize.arithmetic(normalize.pil_backend_lut(*clip, 0.01)).shape == (0, 4)
    assert normalize.arithmetic(np.zeros((3, 256), np.float32)).shape == (0, 4)
    with np.errstate(divide="ignore", invalid="ignore"):
        nan = normalize.pil_backend_lut(clip[0], (0.0, 1.0, 1.0))
    assert normalize.arithmetic(nan).shape == (0, 4)


def test_strided_outputs():
    """A slot of a padded batch (rows contiguous, planes not) gets the same values."""
    lut = normalize.pil_backend_lut((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))
    big = np.full((2, 3, 60, 90), np.nan, np.float32)
    chw.normalize_chw(IMG, lut, big[1, :, :56, :84])
    assert _same(big[1, :, :56, :84], chw.normalize_chw(IMG, lut))
    assert np.isnan(big[0]).all() and np.isnan(big[1, :, 56:]).all() and np.isnan(big[1, :, :, 84:]).all()
    with pytest.raises(ValueError):
        chw.normalize_chw(IMG, lut, np.empty((3, 84, 56), np.float32).transpose(0, 2, 1))
