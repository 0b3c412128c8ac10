"""The fused video writer (``kernels/video_patchify``) against the unfused chain it replaces:
torch's resize of each frame (``resample_tv.resize_rgb``, itself checked against torchvision
in tests/kernels), the fused rescale+normalize table, and the video processors' patchify
written as their reshape/permute. Every geometry the writer branches on: both axes resized
(up and down), one axis, none, a padded group (the last frame repeated), three frames a group,
and outputs large enough to be written with streaming stores."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_mm_grpc.kernels import normalize, resample_tv, video_patchify


def _reference(frames, out_h, out_w, lut, patch, merge):
    """HF's order: resize each frame, normalize, then
    view(1, T, C, gh/m, m, p, gw/m, m, p).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)."""
    t = len(frames)
    resized = np.stack([resample_tv.resize_rgb(f, out_h, out_w, "bicubic") for f in frames])  # T H W C
    x = np.stack([lut[c][resized[..., c]] for c in range(3)], axis=1)  # T C H W
    gh, gw = out_h // patch, out_w // patch
    x = x.reshape(t, 3, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.transpose(2, 5, 3, 6, 1, 0, 4, 7)
    return np.ascontiguousarray(x).reshape(gh * gw, 3 * t * patch * patch)


def _frames(rng, count, h, w):
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(count)]


def _run(frames, out_h, out_w, lut, patch, merge):
    in_h, in_w = frames[0].shape[:2]
    no = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))
    axes = (*(resample_tv.coeffs(in_w, out_w, "bicubic") if in_w != out_w else no),
            *(resample_tv.coeffs(in_h, out_h, "bicubic") if in_h != out_h else no))
    out = np.full(((out_h // patch) * (out_w // patch), 3 * len(frames) * patch * patch), np.nan, np.float32)
    video_patchify.group_resize_patchify(frames, out_h, out_w, *axes, lut, out, patch, merge)
    return out


LUT = normalize.torchvision_backend_lut((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))


@pytest.mark.parametrize("in_size,out_size", [
    ((70, 90), (56, 112)),      # height down, width up
    ((150, 250), (112, 196)),   # both down
    ((56, 90), (56, 140)),      # width only
    ((97, 84), (140, 84)),      # height only
    ((84, 112), (84, 112)),     # no resize
    ((720, 1280), (728, 1288)),  # a 720p frame as Qwen2-VL sizes it: streamed rows
])
@pytest.mark.parametrize("padded", [False, True])
def test_fused_group_equals_resize_then_patchify(in_size, out_size, padded):
    rng = np.random.default_rng(sum(in_size) * 7 + out_size[0])
    frames = _frames(rng, 1 if padded else 2, *in_size)
    if padded:
        frames = frames + [frames[0]]
    got = _run(frames, *out_size, LUT, 14, 2)
    assert np.array_equal(got, _reference(frames, *out_size, LUT, 14, 2))


def test_three_frames_a_group_and_other_patch_geometry():
    rng = np.random.default_rng(3)
    frames = _frames(rng, 2, 61, 75)
    frames = frames + [frames[1]]
    got = _run(frames, 48, 64, LUT, 16, 1)
    assert np.array_equal(got, _reference(frames, 48, 64, LUT, 16, 1))


def test_frames_of_other_sizes_or_a_wrong_out_are_refused():
    rng = np.random.default_rng(4)
    a, b = _frames(rng, 1, 56, 56)[0], _frames(rng, 1, 60, 56)[0]
    out = np.empty((16, 3 * 2 * 196), np.float32)
    no = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))
    with pytest.raises(ValueError, match="one size"):
        video_patchify.group_resize_patchify([a, b], 56, 56, *no, *no, LUT, out, 14, 2)
    with pytest.raises(ValueError, match="out must be"):
        video_patchify.group_resize_patchify([a, a], 56, 56, *no, *no, LUT, out[:4], 14, 2)
