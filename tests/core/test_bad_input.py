"""Bad input: one PreprocessError with the right code and a message naming the image."""

from __future__ import annotations

import io

import blake3
import numpy as np
import pytest
from PIL import Image

import imagegen
from sglang_mm_grpc import Code, Preprocessor, PreprocessError


@pytest.fixture(scope="module")
def pp():
    return Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct")


GOOD = imagegen.png(40, 60)
JPEG = imagegen.jpeg(200, 300)


def _i16_png() -> bytes:
    b = io.BytesIO()
    Image.fromarray(np.arange(35, dtype=np.uint16).reshape(5, 7) * 1000).save(b, "PNG")
    return b.getvalue()


def _tiff() -> bytes:
    b = io.BytesIO()
    Image.new("RGB", (8, 8)).save(b, "TIFF")
    return b.getvalue()


BAD = {
    "empty": (b"", "empty image data"),
    "text": (b"hello, I am not an image", "not a decodable image"),
    "truncated_jpeg": (JPEG[: len(JPEG) // 2], "truncated"),
    "corrupt_png": (GOOD[:60] + bytes(200) + GOOD[260:], "corrupt"),
    "png_header_only": (GOOD[:33], "not a decodable image"),
    "sixteen_bit_gray": (_i16_png(), "more than 8 bits"),
    "sixteen_bit_rgb": (imagegen.sixteen_bit_png_rgb(), "more than 8 bits"),
    "tiff_not_accepted": (_tiff(), "format TIFF is not accepted"),
    "aspect_over_200": (imagegen.png(1, 300), "aspect ratio"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_image(pp, name):
    raw, cause = BAD[name]
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([GOOD, GOOD, raw])
    err = e.value
    assert err.code is Code.INVALID_ARGUMENT, err
    assert err.item == 2 and err.message.startswith("image 2: ")
    assert cause in err.message, err.message


def test_pixel_bomb_checked_from_header():
    """A PNG header claiming 100k x 100k pixels is refused before decoding."""
    import struct
    import zlib

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)) + chunk(
        b"IDAT", zlib.compress(b"\x00" * 1000)) + chunk(b"IEND", b"")
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct")
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([bomb])
    assert e.value.code is Code.RESOURCE_EXHAUSTED and "pixels" in e.value.message


def test_configurable_pixel_limit():
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct", max_image_pixels=100 * 100)
    pp.preprocess([imagegen.png(100, 100)])
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([imagegen.png(100, 101)])
    assert e.value.code is Code.RESOURCE_EXHAUSTED and "10100 pixels" in e.value.message


def test_too_many_images():
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct", max_images=3)
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([GOOD] * 4)
    assert e.value.code is Code.RESOURCE_EXHAUSTED and "limit of 3" in e.value.message


def test_no_images(pp):
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([])
    assert e.value.code is Code.INVALID_ARGUMENT


def test_unknown_model():
    with pytest.raises(PreprocessError) as e:
        Preprocessor.from_model("acme/not-a-model")
    assert e.value.code is Code.NOT_FOUND and "acme/not-a-model" in e.value.message


def test_every_code_is_a_grpc_status():
    import grpc

    err = PreprocessError(Code.RESOURCE_EXHAUSTED, "too big", item=3)
    assert str(err) == "image 3: too big"
    for code in Code:  # the servicer aborts with grpc.StatusCode[code.value]
        assert grpc.StatusCode[code.value].name == code.value


def test_hash_is_blake3_of_bytes_as_received(pp):
    out = pp.preprocess([GOOD, JPEG], input_ids=[151655, 7, 151655])
    assert out.hashes == [blake3.blake3(GOOD).hexdigest(), blake3.blake3(JPEG).hexdigest()]
    assert all(len(h) == 64 and h == h.lower() for h in out.hashes)
    assert out.raw_images == [GOOD, JPEG]
    assert [im.encoded_bytes for im in out.images] == [len(GOOD), len(JPEG)]


def test_server_keeps_working_after_errors(pp):
    for raw, _ in BAD.values():
        with pytest.raises(PreprocessError):
            pp.preprocess([raw])
    assert pp.preprocess([GOOD]).token_counts == [pp.preprocess([GOOD]).token_counts[0]]
