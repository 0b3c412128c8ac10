"""Raw uint8 pixels from the fused writers, for engines that rescale and normalize on the device.

A uint8 ``out`` must hold the resized bytes laid out exactly as the normalized float32
tensor is: equal to the float32 writer's output with the identity table (``float(v)``)
cast to uint8, and to an independent reference (Pillow's ``Image.resize``, or torch's
resize via ``resample_tv``, then a numpy reshape/transpose). Every element is written:
each uint8 run starts once from zeros and once from 255s and must give the same bytes.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import imagegen
from sglang_mm_grpc.kernels import chw, normalize, patchify, resample_pil, resample_tv, video_patchify

CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
IDENTITY = normalize.pil_backend_lut(*CLIP, do_rescale=False, do_normalize=False)  # float(v)
NONE = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))  # an axis that keeps its size
BILINEAR, BICUBIC = 2, 3


def test_identity_table_is_the_byte_value():
    assert np.array_equal(IDENTITY, np.tile(np.arange(256, dtype=np.float32), (3, 1)))


def raw_and_identity(write, shape):
    """``write(out, lut)`` into uint8 outs filled with 0 and with 255, and into a float32
    one filled with NaN (identity table): checks they agree and returns the uint8 one."""
    raw = []
    for fill in (0, 255):
        out = np.full(shape, fill, np.uint8)
        write(out, IDENTITY)
        raw.append(out)
    assert np.array_equal(raw[0], raw[1]), "some uint8 element was not written"
    f32 = np.full(shape, np.nan, np.float32)
    write(f32, IDENTITY)
    assert np.array_equal(f32.astype(np.uint8), raw[0])
    assert np.array_equal(f32, raw[0].astype(np.float32))  # and no NaN left: the cast is exact
    return raw[0]


def rgbx(rgb):
    """Pillow's RGBX layout of ``rgb`` (the padding byte set, to show it is not read)."""
    out = np.full((*rgb.shape[:2], 4), 77, np.uint8)
    out[:, :, :3] = rgb
    return out


def pil_resize(rgb, out_h, out_w, resample):
    if (out_h, out_w) == rgb.shape[:2]:
        return rgb
    return np.asarray(Image.fromarray(rgb).resize((out_w, out_h), resample, reducing_gap=None))


def patches(img, patch, merge, temporal):
    """The HF image patchify (reshape/transpose) of uint8 [H, W, 3], temporal copies repeated."""
    x = img.transpose(2, 0, 1)
    c, h, w = x.shape
    gh, gw = h // patch, w // patch
    p = x.reshape(c, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    p = np.broadcast_to(p[:, :, :, :, :, None], (*p.shape[:5], temporal, patch, patch))
    return p.reshape(gh * gw, c * temporal * patch * patch)


def video_patches(frames, patch, merge):
    """The video processors' view(...).permute(0, 3, 6, 4, 7, 2, 1, 5, 8) of uint8 frames [H, W, 3]."""
    x = np.stack(frames).transpose(0, 3, 1, 2)  # T C H W
    t, c, h, w = x.shape
    gh, gw = h // patch, w // patch
    x = x.reshape(t, c, gh // merge, merge, patch, gw // merge, merge, patch).transpose(2, 5, 3, 6, 1, 0, 4, 7)
    return np.ascontiguousarray(x).reshape(gh * gw, c * t * patch * patch)


def grid_shape(out_h, out_w, patch=14, temporal=2):
    return (out_h // patch) * (out_w // patch), 3 * temporal * patch * patch


# -- images: Pillow's resize (resize_normalize_patchify, lut_patchify) -------------------------


@pytest.mark.parametrize("shape,target", [
    ((70, 90), (56, 112)),     # both axes
    ((56, 90), (56, 140)),     # width only
    ((97, 84), (140, 84)),     # height only
    ((84, 112), (84, 112)),    # none
    ((300, 90), (112, 84)),    # both, Pillow's vertical pass first
])
@pytest.mark.parametrize("resample", [BILINEAR, BICUBIC])
@pytest.mark.parametrize("channels", [3, 4])
def test_resize_patchify_raw(shape, target, resample, channels):
    rgb = imagegen.pixels(*shape, seed=shape[0] + resample)
    src = rgb if channels == 3 else rgbx(rgb)
    got = raw_and_identity(
        lambda out, lut: patchify.resize_normalize_patchify(src, *target, resample, lut, 14, 2, 2, out=out),
        grid_shape(*target))
    assert np.array_equal(got, patches(pil_resize(rgb, *target, resample), 14, 2, 2))


def test_dtype_allocates_uint8_and_lut_is_not_needed():
    rgb = imagegen.pixels(70, 90, seed=1)
    got = patchify.resize_normalize_patchify(rgb, 56, 56, BICUBIC, None, 14, 2, 2, dtype=np.uint8)
    assert got.dtype == np.uint8 and np.array_equal(got, patches(pil_resize(rgb, 56, 56, BICUBIC), 14, 2, 2))
    assert patchify.resize_normalize_patchify(rgb, 56, 56, BICUBIC, IDENTITY, 14, 2, 2).dtype == np.float32
    with pytest.raises(ValueError):  # dtype and out disagree
        patchify.resize_normalize_patchify(rgb, 56, 56, BICUBIC, IDENTITY, 14, 2, 2, out=got, dtype=np.float32)
    with pytest.raises(ValueError):
        patchify.resize_normalize_patchify(rgb, 56, 56, BICUBIC, IDENTITY, 14, 2, 2, dtype=np.float64)
    with pytest.raises(ValueError):
        patchify.lut_patchify(pil_resize(rgb, 56, 56, BICUBIC), IDENTITY, np.empty((16, 1176), np.int16), 14, 2, 2)


def test_vertical_first_pass_by_pass_raw(monkeypatch):
    monkeypatch.setattr(patchify, "VFIRST_GROUP_BYTES", 0)
    rgb = imagegen.pixels(300, 90, seed=5)
    assert not resample_pil.horizontal_first(300, 90, 112, 84)
    got = raw_and_identity(
        lambda out, lut: patchify.resize_normalize_patchify(rgb, 112, 84, BICUBIC, lut, 14, 2, 2, out=out),
        grid_shape(112, 84))
    assert np.array_equal(got, patches(pil_resize(rgb, 112, 84, BICUBIC), 14, 2, 2))


@pytest.mark.parametrize("geometry", [(14, 2, 2), (8, 1, 3)])
@pytest.mark.parametrize("channels", [3, 4])
def test_lut_patchify_raw(geometry, channels):
    patch, merge, temporal = geometry
    rgb = imagegen.pixels(3 * patch * merge, 5 * patch * merge, seed=patch)
    src = rgb if channels == 3 else rgbx(rgb)
    got = raw_and_identity(lambda out, lut: patchify.lut_patchify(src, lut, out, patch, merge, temporal),
                           grid_shape(*rgb.shape[:2], patch, temporal))
    assert np.array_equal(got, patches(rgb, patch, merge, temporal))


def test_slot_of_a_larger_batch_raw():
    rgb = imagegen.pixels(70, 90, seed=2)
    for fill in (0, 255):
        batch = np.full((10 + 16 + 3, 1176), fill, np.uint8)
        patchify.resize_normalize_patchify(rgb, 56, 56, BICUBIC, IDENTITY, 14, 2, 2, out=batch[10:26])
        assert (batch[:10] == fill).all() and (batch[26:] == fill).all()
        assert np.array_equal(batch[10:26], patches(pil_resize(rgb, 56, 56, BICUBIC), 14, 2, 2))


def test_streaming_size_raw():
    """An output past ``STREAM_MIN_BYTES`` as uint8: the float32 one streams, the uint8 one
    is stored (streaming measured slower for it), same bytes."""
    rgb = imagegen.pixels(700, 530, seed=9)
    shape = grid_shape(616, 616)
    assert np.empty(shape, np.uint8).nbytes >= normalize.STREAM_MIN_BYTES
    assert normalize.streams(np.empty(shape, np.float32)) and not normalize.streams(np.empty(shape, np.uint8))
    got = raw_and_identity(
        lambda out, lut: patchify.resize_normalize_patchify(rgb, 616, 616, BICUBIC, lut, 14, 2, 2, out=out), shape)
    assert np.array_equal(got, patches(pil_resize(rgb, 616, 616, BICUBIC), 14, 2, 2))


def test_streamed_raw_output_wherever_the_slot_starts():
    """The writers' streaming path for uint8 (64 bytes a line), called directly: the same
    bytes whatever the slot's offset in a cache line, nothing outside it touched."""
    rgb = imagegen.pixels(70, 90, seed=3)
    resized = pil_resize(rgb, 56, 84, BICUBIC)
    want = patches(resized, 14, 2, 2)
    kernel, fused = patchify._specialized(14, 2, 2)
    coef, lut = normalize.tables(None, np.uint8)
    bh, kh = resample_pil.coeffs(90, 84, BICUBIC)
    bv, kv = resample_pil.coeffs(70, 56, BICUBIC)
    h_first = resample_pil.horizontal_first(70, 90, 56, 84)
    for offset in range(64):
        for run in (lambda o: kernel(resized, coef, lut, o, True),
                    lambda o: fused(rgb, 56, 84, bh, kh, bv, kv, h_first, coef, lut, o, True)):
            flat = np.full(want.size + 128, 7, np.uint8)
            start = (-flat.ctypes.data + offset) % 64
            out = flat[start:start + want.size].reshape(want.shape)
            run(out)
            assert np.array_equal(out, want), offset
            assert (flat[:start] == 7).all() and (flat[start + want.size:] == 7).all()


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_stream_run_any_element_size(dtype):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 250, 700).astype(dtype)
    for _ in range(300):
        n = int(rng.integers(0, 300))
        i, j = int(rng.integers(0, 400 - n + 1)), int(rng.integers(0, 700 - n + 1))
        dst = np.full(400, 251, dtype)
        normalize.stream_run(dst, i, src, j, n)
        assert np.array_equal(dst[i:i + n], src[j:j + n])
        assert (dst[:i] == 251).all() and (dst[i + n:] == 251).all()


# -- images: torch's resize (resampled_patchify with resample_tv.coeffs, horizontal first) ------


@pytest.mark.parametrize("shape,target", [((300, 200), (112, 224)), ((90, 70), (112, 56)), ((56, 90), (56, 140)),
                                          ((97, 84), (140, 84))])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("channels", [3, 4])
def test_resampled_patchify_tv_raw(shape, target, mode, channels):
    rgb = imagegen.pixels(*shape, seed=6)
    src = rgb if channels == 3 else rgbx(rgb)
    (h, w), (oh, ow) = shape, target
    bh, kh = resample_tv.coeffs(w, ow, mode) if ow != w else NONE
    bv, kv = resample_tv.coeffs(h, oh, mode) if oh != h else NONE
    got = raw_and_identity(
        lambda out, lut: patchify.resampled_patchify(src, oh, ow, bh, kh, bv, kv, True, lut, out, 14, 2, 2),
        grid_shape(oh, ow))
    assert np.array_equal(got, patches(resample_tv.resize_rgb(rgb, oh, ow, mode), 14, 2, 2))


# -- video groups (group_resize_patchify) --------------------------------------------------------


@pytest.mark.parametrize("in_size,out_size", [
    ((70, 90), (56, 112)),       # both axes
    ((56, 90), (56, 140)),       # width only
    ((97, 84), (140, 84)),       # height only
    ((84, 112), (84, 112)),      # none
    ((400, 700), (420, 728)),    # past STREAM_MIN_BYTES as uint8
])
@pytest.mark.parametrize("padded", [False, True])
def test_video_group_raw(in_size, out_size, padded):
    rng = np.random.default_rng(sum(in_size) + padded)
    frames = [rng.integers(0, 256, (*in_size, 3), dtype=np.uint8) for _ in range(1 if padded else 2)]
    if padded:
        frames = frames + [frames[0]]  # the same array: resized once
    (h, w), (oh, ow) = in_size, out_size
    axes = (*(resample_tv.coeffs(w, ow, "bicubic") if ow != w else NONE),
            *(resample_tv.coeffs(h, oh, "bicubic") if oh != h else NONE))
    got = raw_and_identity(
        lambda out, lut: video_patchify.group_resize_patchify(frames, oh, ow, *axes, lut, out, 14, 2),
        grid_shape(oh, ow))
    resized = [f if (oh, ow) == (h, w) else resample_tv.resize_rgb(f, oh, ow, "bicubic") for f in frames]
    assert np.array_equal(got, video_patches(resized, 14, 2))


def test_video_streamed_raw_and_warmup():
    video_patchify.warmup(dtype=np.uint8)
    rng = np.random.default_rng(8)
    frames = [rng.integers(0, 256, (70, 90, 3), dtype=np.uint8) for _ in range(2)]
    axes = (*resample_tv.coeffs(90, 112, "bicubic"), *resample_tv.coeffs(70, 56, "bicubic"))
    want = video_patches([resample_tv.resize_rgb(f, 56, 112, "bicubic") for f in frames], 14, 2)
    flat = np.full(want.size + 64, 7, np.uint8)
    start = (-flat.ctypes.data + 5) % 64
    out = flat[start:start + want.size].reshape(want.shape)
    video_patchify._specialized(14, 2, 2)(tuple(frames), np.arange(2), 56, 112, *axes, *normalize.tables(None, np.uint8),
                                          out, True)
    assert np.array_equal(out, want)
    assert (flat[:start] == 7).all() and (flat[start + want.size:] == 7).all()


# -- CHW (normalize_chw / lut_chw) ---------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (37, 53), (64, 300)])
@pytest.mark.parametrize("channels", [3, 4])
def test_chw_raw(shape, channels):
    rgb = imagegen.pixels(*shape, seed=shape[1])
    src = rgb if channels == 3 else rgbx(rgb)
    got = raw_and_identity(lambda out, lut: chw.normalize_chw(src, lut, out), (3, *shape))
    assert np.array_equal(got, rgb.transpose(2, 0, 1))
    assert np.array_equal(chw.normalize_chw(src, None, dtype=np.uint8), got)
    coef, lut = normalize.tables(None, np.uint8)
    direct = np.empty((3, *shape), np.uint8)
    chw.lut_chw(src, coef, lut, direct)
    assert np.array_equal(direct, got)


@pytest.mark.parametrize("channels", [3, 4])
def test_chw_raw_into_a_padded_batch_slot(channels):
    """A slot of a padded batch (rows contiguous, planes not): only the slot is written."""
    rgb = imagegen.pixels(37, 53, seed=11)
    src = rgb if channels == 3 else rgbx(rgb)
    for fill in (0, 255):
        big = np.full((2, 3, 40, 60), fill, np.uint8)
        chw.normalize_chw(src, IDENTITY, big[1, :, :37, :53])
        assert np.array_equal(big[1, :, :37, :53], rgb.transpose(2, 0, 1))
        assert (big[0] == fill).all() and (big[1, :, 37:] == fill).all() and (big[1, :, :, 53:] == fill).all()
    f32 = np.full((2, 3, 40, 60), np.nan, np.float32)
    chw.normalize_chw(src, IDENTITY, f32[1, :, :37, :53])
    assert np.array_equal(f32[1, :, :37, :53].astype(np.uint8), big[1, :, :37, :53])


def test_chw_raw_refuses_strided_rows_and_other_dtypes():
    rgb = imagegen.pixels(8, 6, seed=0)
    with pytest.raises(ValueError):
        chw.normalize_chw(rgb, IDENTITY, np.empty((3, 6, 8), np.uint8).transpose(0, 2, 1))
    with pytest.raises(ValueError):
        chw.normalize_chw(rgb, IDENTITY, np.empty((3, 8, 6), np.int32))
    with pytest.raises(ValueError):
        chw.normalize_chw(rgb, IDENTITY, dtype=np.float64)
