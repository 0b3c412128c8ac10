"""The normalize tables and the fused Qwen writer against the unfused HF chain.

Unfused chain = real Pillow ``Image.resize`` -> transformers' ``rescale`` and
``normalize`` (image_transforms) -> the HF patchify reshape/transpose.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from transformers.image_transforms import normalize as hf_normalize
from transformers.image_transforms import rescale as hf_rescale
from transformers.image_utils import ChannelDimension

import imagegen
from sglang_mm_grpc.kernels import normalize, patchify

CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


@pytest.mark.parametrize("mean,std", [CLIP, HALF, ((0.1, 0.9, 0.33), (0.7, 0.01, 1.3))])
@pytest.mark.parametrize("factor", [1 / 255, 0.5, 1.0])
def test_pil_lut_equals_hf_rescale_normalize(mean, std, factor):
    chw = np.arange(256, dtype=np.uint8)[None, None, :].repeat(3, axis=0)  # [3, 1, 256]
    f = ChannelDimension.FIRST
    ref = hf_normalize(hf_rescale(chw, factor, input_data_format=f), mean, std, input_data_format=f)
    lut = normalize.pil_backend_lut(mean, std, factor)
    assert lut.dtype == np.float32 and np.array_equal(lut, ref[:, 0, :])


def test_pil_lut_without_rescale_or_normalize():
    chw = np.arange(256, dtype=np.uint8)[None, None, :].repeat(3, axis=0)
    f = ChannelDimension.FIRST
    only_norm = hf_normalize(chw, *CLIP, input_data_format=f)
    assert np.array_equal(normalize.pil_backend_lut(*CLIP, do_rescale=False), only_norm[:, 0, :])
    only_rescale = hf_rescale(chw, 1 / 255, input_data_format=f)
    assert np.array_equal(normalize.pil_backend_lut(*CLIP, do_normalize=False), only_rescale[:, 0, :])


def test_torchvision_lut_equals_torch_fused_normalize():
    torch = pytest.importorskip("torch")
    tvF = pytest.importorskip("torchvision.transforms.v2.functional")
    for mean, std in (CLIP, HALF):
        x = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 256).repeat(3, 1, 1)
        m = torch.tensor(mean) * (1.0 / (1 / 255))
        s = torch.tensor(std) * (1.0 / (1 / 255))
        ref = tvF.normalize(x.to(torch.float32), m, s).numpy()[:, 0, :]
        assert np.array_equal(normalize.torchvision_backend_lut(mean, std), ref)


def unfused(rgb, out_h, out_w, resample, mean, std, patch, merge, temporal):
    img = Image.fromarray(rgb)
    if (out_h, out_w) != rgb.shape[:2]:
        img = img.resize((out_w, out_h), resample, reducing_gap=None)
    chw = np.asarray(img).transpose(2, 0, 1)
    f = ChannelDimension.FIRST
    x = hf_normalize(hf_rescale(chw, 1 / 255, input_data_format=f), mean, std, input_data_format=f)
    c, h, w = x.shape
    gh, gw = h // patch, w // patch
    p = x.reshape(c, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    p = np.broadcast_to(p[:, :, :, :, :, None], (*p.shape[:5], temporal, patch, patch))
    return p.reshape(gh * gw, c * temporal * patch * patch)


@pytest.mark.slow  # 120 examples, about 85 s
@settings(max_examples=120, deadline=None)
@given(
    h=st.integers(1, 300), w=st.integers(1, 300),
    gh=st.integers(1, 12), gw=st.integers(1, 12),
    resample=st.sampled_from([0, 1, 2, 3, 4, 5]),
    geometry=st.sampled_from([(14, 2, 2), (16, 2, 2), (14, 2, 1), (8, 1, 3)]),
    seed=st.integers(0, 1000),
)
def test_fused_equals_unfused(h, w, gh, gw, resample, geometry, seed):
    patch, merge, temporal = geometry
    out_h, out_w = gh * patch * merge, gw * patch * merge
    rgb = imagegen.pixels(h, w, seed, "noise")
    lut = normalize.pil_backend_lut(*CLIP)
    got = patchify.resize_normalize_patchify(rgb, out_h, out_w, resample, lut, patch, merge, temporal)
    want = unfused(rgb, out_h, out_w, resample, *CLIP, patch, merge, temporal)
    assert got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("shape", [(56, 56), (56, 112), (84, 56)])
def test_no_resize_is_a_pure_relayout(shape):
    rgb = imagegen.pixels(*shape, seed=1)
    lut = normalize.pil_backend_lut(*HALF)
    got = patchify.resize_normalize_patchify(rgb, *shape, 3, lut, 14, 2, 2)
    assert np.array_equal(got, unfused(rgb, *shape, 3, *HALF, 14, 2, 2))


@pytest.mark.parametrize("shape,target", [((56, 56), (56, 56)), ((84, 112), (84, 112)), ((70, 90), (56, 84))])
@pytest.mark.parametrize("table", ["arithmetic", "lookup"])
def test_rgbx_input_equals_hf_on_the_rgb(shape, target, table):
    """Pillow's RGBX buffer, read in place: with and without a resize, through the fitted
    arithmetic and through the plain table (a lut no fit exists for)."""
    rgb = imagegen.pixels(*shape, seed=4)
    rgbx = np.full((*shape, 4), 255, np.uint8)
    rgbx[:, :, :3] = rgb
    lut = normalize.pil_backend_lut(*CLIP)
    if table == "lookup":
        lut = lut.copy()
        lut[0, 17] = np.nextafter(lut[0, 17], np.float32(9))  # off the line: no arithmetic fit
        assert normalize.arithmetic(lut).shape[0] == 0
    got = patchify.resize_normalize_patchify(rgbx, *target, 3, lut, 14, 2, 2)
    want = patchify.resize_normalize_patchify(rgb, *target, 3, lut, 14, 2, 2)
    assert np.array_equal(got, want)
    if table == "arithmetic":
        assert np.array_equal(got, unfused(rgb, *target, 3, *CLIP, 14, 2, 2))


def test_writes_into_a_slot_of_a_larger_batch():
    rgb = imagegen.pixels(70, 90, seed=2)
    lut = normalize.pil_backend_lut(*CLIP)
    batch = np.full((10 + 16, 1176), np.nan, dtype=np.float32)
    patchify.resize_normalize_patchify(rgb, 56, 56, 3, lut, 14, 2, 2, out=batch[10:])
    assert np.isnan(batch[:10]).all()
    assert np.array_equal(batch[10:], unfused(rgb, 56, 56, 3, *CLIP, 14, 2, 2))


@pytest.mark.parametrize("shape,target", [((300, 200), (112, 224)), ((60, 500), (84, 336)), ((90, 70), (112, 56)),
                                          ((37, 301), (56, 308)), ((301, 37), (308, 56)), ((112, 90), (112, 56))])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "lanczos"])
def test_resampled_patchify_equals_resize_then_patchify(shape, target, mode):
    """Band by band through torch's antialiased passes (horizontal first, as a fast
    processor resizes), RGB and Pillow's RGBX alike: the resize, then the patchify."""
    from sglang_mm_grpc.kernels import resample_tv

    rgb = imagegen.pixels(*shape, seed=6)
    rgbx = np.full((*shape, 4), 3, np.uint8)
    rgbx[:, :, :3] = rgb
    lut = normalize.torchvision_backend_lut(*CLIP)
    (h, w), (oh, ow) = shape, target
    want = np.empty(((oh // 14) * (ow // 14), 1176), np.float32)
    patchify.lut_patchify(resample_tv.resize_rgb(rgb, oh, ow, mode), lut, want, 14, 2, 2)
    none = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))
    bh, kh = resample_tv.coeffs(w, ow, mode) if ow != w else none
    bv, kv = resample_tv.coeffs(h, oh, mode) if oh != h else none
    for src in (rgb, rgbx):
        got = np.full_like(want, np.nan)
        patchify.resampled_patchify(src, oh, ow, bh, kh, bv, kv, True, lut, got, 14, 2, 2)
        assert np.array_equal(got, want)


@pytest.mark.parametrize("group_bytes", [0, 1 << 40])
def test_vertical_first_by_groups_or_pass_by_pass(monkeypatch, group_bytes):
    """A resize Pillow runs vertical first gives the same patches band group by band group
    and pass by pass over the whole image (``VFIRST_GROUP_BYTES`` picks one)."""
    monkeypatch.setattr(patchify, "VFIRST_GROUP_BYTES", group_bytes)
    lut = normalize.pil_backend_lut(*CLIP)
    for (h, w), (oh, ow), f in [((600, 200), (224, 196), 3), ((300, 90), (112, 84), 1), ((130, 61), (56, 56), 2)]:
        rgb = imagegen.pixels(h, w, seed=h)
        assert not patchify.resample_pil.horizontal_first(h, w, oh, ow)
        want = unfused(rgb, oh, ow, f, *CLIP, 14, 2, 2)
        assert np.array_equal(patchify.resize_normalize_patchify(rgb, oh, ow, f, lut, 14, 2, 2), want)


@pytest.mark.parametrize("offset", range(0, 16))
def test_streamed_output_equals_the_stored_one(monkeypatch, offset):
    """A large output is assembled a merge block at a time and written with streaming
    stores: the same values wherever the slot starts relative to a cache line, and
    nothing outside the slot is touched."""
    rgb = imagegen.pixels(70, 90, seed=3)
    lut = normalize.pil_backend_lut(*CLIP)
    want = unfused(rgb, 56, 84, 3, *CLIP, 14, 2, 2)
    monkeypatch.setattr(normalize, "STREAM_MIN_BYTES", 0)
    assert normalize.streams(want)
    flat = np.full(want.size + 64, np.nan, np.float32)
    start = (-flat.ctypes.data // 4 + offset) % 16  # the slot starts `offset` floats into a line
    out = flat[start:start + want.size].reshape(want.shape)
    patchify.resize_normalize_patchify(rgb, 56, 84, 3, lut, 14, 2, 2, out=out)
    assert np.array_equal(out, want)
    assert np.isnan(flat[:start]).all() and np.isnan(flat[start + want.size:]).all()


def test_rejects_bad_targets():
    rgb = imagegen.pixels(10, 10)
    lut = normalize.pil_backend_lut(*CLIP)
    with pytest.raises(ValueError):
        patchify.resize_normalize_patchify(rgb, 30, 28, 3, lut, 14, 2, 2)
    with pytest.raises(ValueError):
        patchify.resize_normalize_patchify(rgb, 28, 28, 3, lut, 14, 2, 2, out=np.empty((3, 1176), np.float32))
