"""A PNG's orientation from its header, as Pillow learns it only once it decodes.

Pillow reads a PNG's EXIF (eXIf), XMP (iTXt ``XML:com.adobe.xmp``) and ImageMagick's
``Raw profile type exif`` (zTXt) from the chunks after the image data only while it
decodes. ``open_image`` reads those chunks with Pillow's own handlers, skipping the image
data by length, so its size is the decoded one: checked here for every place such a
chunk can sit (before or after the data, split data, animated PNGs with and without a
default image), and the image data is never decompressed on the way.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

import imagegen
from sglang_mm_grpc.media import decode
from sglang_mm_grpc.media.decode import decode_pixels, open_image

XMP = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description tiff:Orientation="%d"/>'
       b'</rdf:RDF></x:xmpmeta>')


def chunk(cid: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + cid + data + struct.pack(">I", zlib.crc32(cid + data) & 0xFFFFFFFF)


def chunks(raw: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 8
    while pos < len(raw):
        (n,) = struct.unpack(">I", raw[pos:pos + 4])
        out.append((raw[pos + 4:pos + 8], raw[pos + 8:pos + 8 + n]))
        pos += 12 + n
    return out


def exif(orientation: int) -> bytes:
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()[6:]  # without "Exif\0\0", as an eXIf chunk holds it


def eXIf(orientation: int) -> bytes:
    return chunk(b"eXIf", exif(orientation))


def xmp(orientation: int) -> bytes:
    return chunk(b"iTXt", b"XML:com.adobe.xmp\x00\x00\x00\x00\x00" + XMP % orientation)


def raw_profile(orientation: int) -> bytes:
    full = b"Exif\x00\x00" + exif(orientation)
    text = f"\nexif\n{len(full)}\n{full.hex()}".encode()
    return chunk(b"zTXt", b"Raw profile type exif\x00\x00" + zlib.compress(text))


def png(h: int = 20, w: int = 50, before=(), after=(), split: int = 1) -> bytes:
    """A PNG with ``before`` chunks ahead of its image data and ``after`` chunks after it,
    the data split into ``split`` IDAT chunks."""
    raw = imagegen.png(h, w, seed=h + w)
    out = raw[:8]
    for cid, data in chunks(raw):
        if cid == b"IDAT":
            out += b"".join(before)
            step = -(-len(data) // split)
            out += b"".join(chunk(b"IDAT", data[i:i + step]) for i in range(0, len(data), step))
            out += b"".join(after)
        else:
            out += chunk(cid, data)
    return out


def apng(default_image: bool, after_chunk: bytes, extra: bytes) -> bytes:
    """An animated PNG (two frames, optionally a default image outside the animation)
    with ``extra`` right after its first ``after_chunk`` (IDAT or fdAT)."""
    a = Image.fromarray(imagegen.pixels(20, 50, seed=1))
    b = Image.fromarray(imagegen.pixels(20, 50, seed=2))
    buf = io.BytesIO()
    a.save(buf, "PNG", save_all=True, append_images=[b], default_image=default_image)
    raw = buf.getvalue()
    out, done = raw[:8], False
    for cid, data in chunks(raw):
        out += chunk(cid, data)
        if cid == after_chunk and not done:
            out += extra
            done = True
    assert done
    return out


CASES = {
    "eXIf after the data": png(after=[eXIf(6)]),
    "eXIf after split data": png(after=[eXIf(8)], split=5),
    "eXIf before the data": png(before=[eXIf(6)]),
    "eXIf after, rotating 180": png(after=[eXIf(3)]),
    "XMP before the data": png(before=[xmp(6)]),
    "XMP after the data": png(after=[xmp(5)]),
    "raw profile after the data": png(after=[raw_profile(7)]),
    "XMP before, eXIf 1 after (EXIF wins)": png(before=[xmp(6)], after=[eXIf(1)]),
    "text after, no orientation": png(after=[chunk(b"tEXt", b"Comment\x00hello")]),
    "no metadata": png(),
    "APNG, eXIf after its IDAT frame": apng(False, b"IDAT", eXIf(6)),
    "APNG, eXIf after a later frame": apng(False, b"fdAT", eXIf(6)),
    "APNG with a default image, eXIf after it": apng(True, b"IDAT", eXIf(6)),
    "APNG with a default image, eXIf after a frame": apng(True, b"fdAT", eXIf(6)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_header_size_is_the_decoded_size(name):
    raw = CASES[name]
    header = open_image(raw, item=0)
    image = decode_pixels(open_image(raw, item=0))
    assert (header.height, header.width) == (image.height, image.width)


def test_the_cases_cover_both_answers():
    sizes = {name: (open_image(raw, item=0).height, open_image(raw, item=0).width) for name, raw in CASES.items()}
    assert sizes["eXIf after the data"] == (50, 20) and sizes["no metadata"] == (20, 50)
    assert sizes["APNG, eXIf after its IDAT frame"] == (50, 20)
    assert sizes["APNG, eXIf after a later frame"] == (20, 50)  # Pillow stops at the next frame


def test_image_data_is_skipped_not_decompressed(monkeypatch):
    """The walk never hands image data to zlib (only text chunks are inflated, here none)."""
    raw = png(h=300, w=400, after=[eXIf(6)], split=40)

    def refuse(*a, **k):
        raise AssertionError("decompressed")

    monkeypatch.setattr(zlib, "decompress", refuse)
    monkeypatch.setattr(zlib, "decompressobj", refuse)
    header = open_image(raw, item=0)
    assert (header.height, header.width) == (400, 300)


def test_no_text_after_the_data_skips_the_walk(monkeypatch):
    called = []
    monkeypatch.setattr(decode, "_read_chunks_after_data", lambda *a: called.append(a))
    open_image(png(before=[eXIf(1)], split=3), item=0)
    open_image(png(split=3), item=0)
    assert called == []
    open_image(png(after=[eXIf(6)]), item=0)
    assert len(called) == 1


def test_a_broken_trailing_chunk_ends_the_walk_as_pillow_does():
    """A chunk type that is not a chunk type stops ``load_end``; the walk stops there too."""
    raw = png(after=[b"\x00\x00\x00\x04\x01\x02\x03\x04abcdCRCC", eXIf(6)])
    header = open_image(raw, item=0)
    image = decode_pixels(open_image(raw, item=0))
    assert (header.height, header.width) == (image.height, image.width) == (20, 50)


def test_pixels_unchanged():
    """Reading the chunks first changes nothing Pillow then decodes."""
    raw = png(after=[eXIf(6)])
    image = decode_pixels(open_image(raw, item=0))
    from PIL import ImageOps

    expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(raw))).convert("RGB"))
    assert np.array_equal(image.rgb, expected)
