"""pack_rgb: Pillow's RGBX buffer -> packed RGB, against numpy's own slicing."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_mm_grpc.kernels.pixels import pack_rgb


@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (3, 5), (7, 3), (2, 2), (720, 1280), (5, 1001)])
def test_pack_rgb_equals_slicing(shape):
    """Sizes whose pixel count is and is not a multiple of four (the word loop's tail)."""
    rgbx = np.random.default_rng(sum(shape)).integers(0, 256, (*shape, 4), dtype=np.uint8)
    got = pack_rgb(rgbx)
    assert got.flags.c_contiguous and got.shape == (*shape, 3)
    assert np.array_equal(got, rgbx[:, :, :3])


def test_pack_rgb_rejects_other_layouts():
    with pytest.raises(ValueError):
        pack_rgb(np.zeros((2, 2, 3), np.uint8))
