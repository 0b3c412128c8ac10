"""Every family writes every element of its slot of pixel_values.

The driver does not zero a batch that its slots cover (a lone image), so an element a
family leaves unwritten would carry whatever the memory held. Slots are pre-filled with
NaN here; any NaN left is an element the family skipped. Every preset, sizes that give
few and many tiles/crops, and images already at the target size.
"""

from __future__ import annotations

import numpy as np
import pytest

import imagegen
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.media.decode import decode_image

SIZES = [(37, 53), (336, 336), (480, 640), (300, 1400), (1400, 300)]


@pytest.mark.parametrize("model", imagegen.image_presets())
def test_process_item_writes_its_whole_slot(model):
    pp = Preprocessor.from_model(model, cache_bytes=0)
    family = pp.family
    sizes = SIZES + [family.plan(64, 64, 0).resized_size]
    for h, w in sizes:
        img = decode_image(imagegen.jpeg(h, w, seed=h + w), item=0)
        plan = family.plan(img.height, img.width, 0)
        shape, (slot,) = family.batch_shape([plan])
        batch = np.full(shape, np.nan, np.float32)
        family.process_item(img, plan, batch[slot])
        left = int(np.isnan(batch[slot]).sum())
        assert left == 0, f"{model} {w}x{h}: {left} of {batch[slot].size} elements of the slot not written"


def test_a_lone_image_batch_is_not_zeroed_but_padding_is():
    """Batches are zeroed exactly where no slot reaches (padding), never when slots cover them."""
    from sglang_mm_grpc.pipeline.driver import _new_batch

    lone = _new_batch((1, 5, 3, 4, 4), [(0, slice(0, 5))])
    assert lone.shape == (1, 5, 3, 4, 4)
    padded = _new_batch((2, 5, 3, 4, 4), [(0, slice(0, 5)), (1, slice(0, 3))])
    assert not padded.any()


def test_batches_start_on_a_cache_line():
    """pixel_values starts on a 64-byte boundary, so the kernels' streaming stores cover
    whole cache lines (a 336-float tile row is exactly 21 of them)."""
    from sglang_mm_grpc.pipeline.driver import _new_batch

    for shape in [(1, 5, 3, 336, 336), (3996, 1176), (7, 13), (1,)]:
        for _ in range(3):
            batch = _new_batch(shape, [(slice(None),)])
            assert batch.ctypes.data % 64 == 0 and batch.shape == shape and batch.dtype == np.float32
            assert batch.flags.c_contiguous and batch.flags.writeable
