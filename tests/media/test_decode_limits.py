"""The decoder's pixel limit is the configured one (``--max-image-pixels``), not Pillow's.

Pillow refuses in ``Image.open`` anything over its global ``MAX_IMAGE_PIXELS`` (89M by
default; a warning we make an error, then a hard error over twice that). A configured
limit above Pillow's must still admit images up to it, and every refusal must name the
configured limit, not Pillow's.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from PIL import Image

import imagegen
from sglang_mm_grpc.core.errors import Code, PreprocessError
from sglang_mm_grpc.media.decode import DEFAULT_MAX_PIXELS, decode_image


def _png_header(width: int, height: int) -> bytes:
    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_configured_limit_above_pillows_admits_up_to_it(monkeypatch):
    # Pillow's global scaled down so the case is cheap: 40x40 = 1600 pixels is over
    # Pillow's 1000 (it would warn, which the decoder turns into a refusal) but within ours.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    img = decode_image(imagegen.png(40, 40, seed=3), item=0, max_pixels=4096)
    assert (img.height, img.width) == (40, 40)
    # ... and over twice Pillow's limit (Pillow's hard error) as well.
    img = decode_image(imagegen.png(60, 60, seed=4), item=0, max_pixels=4096)
    assert (img.height, img.width) == (60, 60)


def test_configured_limit_still_refuses_above_it(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(PreprocessError) as e:
        decode_image(imagegen.png(70, 70, seed=5), item=2, max_pixels=4096)
    assert e.value.code is Code.RESOURCE_EXHAUSTED
    assert e.value.message.startswith("image 2: ") and "4096 (max_image_pixels)" in e.value.message


def test_pillow_limit_is_never_lowered(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    decode_image(imagegen.png(10, 10), item=0, max_pixels=500)
    assert Image.MAX_IMAGE_PIXELS == 10_000


@pytest.mark.parametrize("size", [(100_000, 100_000), (9000, 9000), (2**31 - 1, 2**31 - 1)])
def test_bomb_refusal_names_the_configured_limit(size):
    """Whether Pillow's check or ours fires first, the message names the claimed size
    and max_image_pixels."""
    w, h = size
    with pytest.raises(PreprocessError) as e:
        decode_image(_png_header(w, h), item=0)
    msg = e.value.message
    assert e.value.code is Code.RESOURCE_EXHAUSTED
    assert f"{w * h} pixels" in msg and f"{DEFAULT_MAX_PIXELS} (max_image_pixels)" in msg, msg
    assert "178956970" not in msg  # Pillow's own (2 x 89M) limit is not the one that applies
