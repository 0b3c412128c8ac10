"""Decoded pixels are Pillow's own buffer, read in place (an RGB JPEG: an array of our
own that Pillow decodes into), and equal what HF sees.

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
from sglang_mm_grpc.core.errors import PreprocessError
from sglang_mm_grpc.media import decode
from sglang_mm_grpc.media.decode import decode_image
from sglang_mm_grpc.media.pillow_buffer import enable_in_place_decode, lend_rgbx, rgbx_view

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


def _jpegs() -> dict[str, bytes]:
    """RGB JPEGs of every kind the decoder meets, odd sizes, and one whose entropy-coded
    data is damaged (libjpeg warns and still decodes every row)."""
    out = {n: raw for n, raw in CORPUS.items() if n.startswith("jpeg_")}
    rgb = Image.fromarray(imagegen.pixels(37, 53, 4, "noise"))
    out["jpeg_restart_markers"] = imagegen.encode(rgb, "JPEG", quality=90, restart_marker_rows=1)
    out["jpeg_optimized_odd"] = imagegen.encode(rgb, "JPEG", quality=75, optimize=True, subsampling=1)
    out["jpeg_1x1"] = imagegen.encode(rgb.crop((0, 0, 1, 1)), "JPEG")
    raw = bytearray(imagegen.jpeg(64, 96, seed=5, kind="noise"))
    start = raw.index(b"\xff\xda") + 20
    for i in range(start, len(raw) - 40, 97):
        raw[i] = (raw[i] + 77) % 255  # never 0xff: markers stay as they were
    out["jpeg_damaged_data"] = bytes(raw)
    return out


JPEGS = _jpegs()


@pytest.mark.parametrize("block_allocator", [0, 1])
@pytest.mark.parametrize("name", sorted(JPEGS))
def test_rgb_jpeg_decodes_into_an_array_of_its_own(name, block_allocator):
    """Whatever Pillow's allocator: an RGB JPEG upright as stored decodes straight into
    a new array (no image memory of Pillow's, nothing copied), equal to HF's input;
    other JPEGs (grey, CMYK, turned by EXIF) go Pillow's way."""
    raw = JPEGS[name]
    header = Image.open(io.BytesIO(raw))
    lent = header.mode == "RGB" and header.getexif().get(0x0112, 1) in (0, 1)
    before = Image.core.get_use_block_allocator()
    Image.core.set_use_block_allocator(block_allocator)
    try:
        img = decode_image(raw, item=0)
    finally:
        Image.core.set_use_block_allocator(before)
    assert np.array_equal(img.pixels[:, :, :3], _hf_rgb(raw))
    assert (img.pixels.shape[2] == 4 and img.pixels.base is None) == lent


@pytest.mark.parametrize("name", ["jpeg_baseline_420", "jpeg_progressive", "jpeg_restart_markers", "jpeg_damaged_data"])
def test_lent_array_is_overwritten_everywhere(name):
    """Every byte of the lent array is written by the decoder (the fourth 255), so what
    the memory held before never shows."""
    raw = JPEGS[name]
    im = Image.open(io.BytesIO(raw))
    lent = lend_rgbx(im)
    lent[...] = 123
    im.load()
    assert np.array_equal(lent[:, :, :3], np.asarray(Image.open(io.BytesIO(raw)).convert("RGB")))
    assert (lent[:, :, 3] == 255).all()


def test_lent_array_lives_as_long_as_the_image():
    raw = JPEGS["jpeg_444"]
    im = Image.open(io.BytesIO(raw))
    lent = lend_rgbx(im)
    im.load()
    alive = weakref.ref(lent)
    del lent
    gc.collect()
    assert alive() is not None, "the image must hold its pixels"
    others = [np.full((61, 87, 4), 9, np.uint8) for _ in range(16)]  # would reuse freed memory
    assert np.array_equal(np.asarray(im), np.asarray(Image.open(io.BytesIO(raw)).convert("RGB")))
    del im
    gc.collect()
    assert alive() is None and len(others) == 16


def test_loaded_or_other_images_are_not_lent():
    im = Image.open(io.BytesIO(JPEGS["jpeg_444"]))
    im.load()
    assert lend_rgbx(im) is None
    for name in ("jpeg_gray", "jpeg_cmyk", "png_rgb", "webp_lossy"):
        assert lend_rgbx(Image.open(io.BytesIO(CORPUS[name]))) is None, name


@pytest.mark.parametrize("cut", [0.3, 0.9])
def test_truncated_jpeg_fails_as_without_lending(cut, monkeypatch):
    """A cut JPEG is refused with Pillow's message either way (no rows left unwritten
    are ever handed on)."""
    full = imagegen.jpeg(120, 160, seed=6, kind="noise")
    raw = full[: int(len(full) * cut)]
    with pytest.raises(PreprocessError) as lent:
        decode_image(raw, item=3)
    monkeypatch.setattr(decode, "lend_rgbx", lambda im: None)
    with pytest.raises(PreprocessError) as plain:
        decode_image(raw, item=3)
    assert lent.value.code == plain.value.code and str(lent.value) == str(plain.value)
    assert "truncated" in str(lent.value) and lent.value.item == 3
