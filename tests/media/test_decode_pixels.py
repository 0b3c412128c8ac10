"""Decoded pixels are Pillow's own buffer, read in place, and equal what HF sees.

The reference is transformers' own path: ``convert_to_rgb(exif_transpose(open(raw)))``
as a numpy array, for every mode and format the corpus holds.
"""

from __future__ import annotations

import gc
import io
import weakref
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

import imagegen
from sglang_mm_grpc.media.decode import decode_image
from sglang_mm_grpc.media.pillow_buffer import enable_in_place_decode, rgbx_view

CORPUS = imagegen.modes_corpus()


@pytest.fixture(autouse=True, scope="module")
def in_place_decode():
    """As the server runs (``Server`` turns it on for its process); restored afterwards."""
    before = Image.core.get_use_block_allocator()
    enable_in_place_decode()
    yield
    Image.core.set_use_block_allocator(before)


def _hf_rgb(raw: bytes) -> np.ndarray:
    from transformers.image_transforms import convert_to_rgb

    return np.asarray(convert_to_rgb(ImageOps.exif_transpose(Image.open(io.BytesIO(raw)))))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_decoded_pixels_equal_hf_input(name):
    img = decode_image(CORPUS[name], item=0)
    want = _hf_rgb(CORPUS[name])
    assert img.pixels.shape[2] == 4, "Pillow's buffer should be read in place"
    assert img.pixels.flags.writeable and img.pixels.flags.c_contiguous
    assert np.array_equal(img.pixels[:, :, :3], want)
    assert (img.height, img.width) == want.shape[:2]
    rgb = img.rgb  # packed once, replacing the padded buffer
    assert rgb.shape == want.shape and rgb.flags.c_contiguous and np.array_equal(rgb, want)
    assert img.pixels is rgb and img.rgb is rgb


def test_view_outlives_the_image():
    """The exported capsules hold the image memory: dropping the image, then allocating
    images of the same size (which would reuse freed memory), leaves the view intact."""
    a = imagegen.pixels(48, 64, seed=7)
    im = Image.fromarray(a)
    view = rgbx_view(im)
    del im
    gc.collect()
    others = [Image.new("RGB", (64, 48), (9, 9, 9)) for _ in range(16)]
    assert np.array_equal(view[:, :, :3], a)
    assert len(others) == 16


def _rss_mb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def test_buffers_are_released():
    """The exporter goes with the last array over it, and with it Pillow's image memory:
    decoding a 16 MB (RGBX) image 60 times leaves RSS where a handful of them put it."""
    view = rgbx_view(Image.new("RGB", (64, 48)))
    owner = weakref.ref(view.base)
    del view
    gc.collect()
    assert owner() is None
    raw = imagegen.png(2048, 2048, seed=1, kind="smooth")
    for _ in range(5):
        decode_image(raw, item=0)
    before = _rss_mb()
    for i in range(60):
        img = decode_image(raw, item=0)
        if i % 2:
            img.rgb  # the packed copy replaces the buffer
    del img
    gc.collect()
    assert _rss_mb() - before < 200, "decoded pixel buffers are not being freed"


def test_not_exportable_falls_back_to_packed_pixels():
    """Modes other than RGB are not read in place; neither is an image Pillow allocated
    in several blocks (block allocator off): the decoder then copies packed RGB."""
    assert rgbx_view(Image.new("L", (4, 4))) is None
    block_size = Image.core.get_block_size()
    Image.core.set_use_block_allocator(0)
    try:
        raw = imagegen.png(300, 200, seed=2)
        Image.core.set_block_size(4096)  # rows of 800 bytes: several blocks for 300 rows
        try:
            many = Image.new("RGB", (200, 300))
            assert rgbx_view(many) is None
            img = decode_image(raw, item=0)
        finally:
            Image.core.set_block_size(block_size)
    finally:
        Image.core.set_use_block_allocator(1)
    assert img.pixels.shape == (300, 200, 3) and np.array_equal(img.pixels, _hf_rgb(raw))
