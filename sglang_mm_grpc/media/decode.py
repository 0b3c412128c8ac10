"""Encoded bytes -> the RGB uint8 pixels the HF processor would see.

The parity reference is ``ImageOps.exif_transpose(Image.open(BytesIO(raw)))`` handed to
the processor, whose ``convert_to_rgb`` composites transparency onto white. This module
does exactly that with Pillow, after checks that refuse what must not be decoded:
unknown formats, images whose header claims too many pixels (decompression bombs), and
samples wider than 8 bits (which Pillow would silently truncate or the processor clip).
"""

from __future__ import annotations

import io
import re
import struct
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from ..core.carriers import DecodedImage
from ..core.errors import Code, PreprocessError, invalid
from .pillow_buffer import lend_rgbx, rgba_view, rgbx_view

#: Formats decoded by default. MPO is what many phone cameras write (JPEG + previews).
DEFAULT_FORMATS = frozenset({"JPEG", "MPO", "PNG", "WEBP", "GIF", "BMP"})
#: 8192 x 8192: a 8000x6000 photo fits, a pixel bomb does not.
DEFAULT_MAX_PIXELS = 1 << 26

_ORIENTATION = 0x0112
_SWAPS_SIDES = range(5, 9)  # transposes and 90-degree rotations
_CLAIMED = re.compile(r"Image size \((\d+) pixels\)")
_WIDE_MODES = ("I", "F", "I;16", "I;16B", "I;16L", "I;16N", "I;32", "RGB;16", "RGBA;16")


def _wider_than_8_bits(im: Image.Image) -> bool:
    if im.mode in _WIDE_MODES or im.mode.startswith("I;"):
        return True
    # 48/64-bit PNGs open as "RGB"/"RGBA" with a 16-bit raw mode Pillow would truncate.
    for tile in getattr(im, "tile", None) or ():
        args = tile[3] if len(tile) > 3 else None
        rawmode = args[0] if isinstance(args, tuple) and args else args
        if isinstance(rawmode, str) and "16" in rawmode:
            return True
    return False


#: How an image with transparency becomes the pixels a family gets: "white" composites
#: it onto white (transformers' ``convert_to_rgb``, what every processor does unless it
#: says otherwise); "keep" hands such an image over as RGBA (``DecodedImage.alpha``) for
#: the family to flatten itself. Images without transparency data are RGB either way.
TRANSPARENCY = ("white", "keep")


@dataclass(frozen=True)
class ImageHeader:
    """An image opened and checked from its header alone: nothing decoded yet.

    ``height``/``width`` are after EXIF orientation, as ``decode_pixels`` will apply it.
    For a PNG whose EXIF Pillow reads only with the pixels (an eXIf chunk, XMP or an
    ImageMagick "Raw profile type exif" after the image data), the chunks after the image
    data are read here with Pillow's own chunk handlers, the image data skipped by its
    chunk lengths, never decompressed (``_png_orientation``), so the size is the decoded
    one; callers still compare the decoded size (the driver re-plans an image whose
    decoded size differs, which no file in the tests does).
    """

    image: Image.Image
    format: str
    height: int
    width: int
    item: int


def decode_image(
    data: bytes,
    *,
    item: int,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    formats: frozenset[str] = DEFAULT_FORMATS,
    transparency: str = "white",
) -> DecodedImage:
    """Decode one image or raise a PreprocessError naming ``item`` and the cause:
    ``open_image`` then ``decode_pixels``."""
    return decode_pixels(open_image(data, item=item, max_pixels=max_pixels, formats=formats), transparency=transparency)


def open_image(
    data: bytes,
    *,
    item: int,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    formats: frozenset[str] = DEFAULT_FORMATS,
) -> ImageHeader:
    """Open one image and check it from its header (format, pixel count, sample width),
    and read its EXIF-oriented size, without decoding a pixel; or raise a
    PreprocessError naming ``item`` and the cause."""
    if not data:
        raise invalid("empty image data", item=item)
    _pillow_bomb_limit_at_least(max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        # Pillow's own header check fired (its limit is never below ours, see above):
        # name our limit, which is the one the operator configured.
        m = _CLAIMED.search(str(e))
        claimed = f"{m.group(1)} pixels" if m else "too many pixels"
        raise PreprocessError(
            Code.RESOURCE_EXHAUSTED,
            f"image header claims {claimed}, over the limit of {max_pixels} (max_image_pixels); not decoded",
            item=item,
        ) from None
    except Exception as e:  # Pillow raises many types for garbage input
        raise invalid(f"not a decodable image ({len(data)} bytes): {_reason(e)}", item=item) from None
    # The bytes are all here: one decoder call takes them at once, where Pillow's 64 KiB
    # pieces make libjpeg suspend and resume at each (1-5% of a JPEG's decode).
    im.decodermaxblock = max(im.decodermaxblock, len(data))
    fmt = im.format or ""
    if fmt not in formats:
        raise invalid(f"image format {fmt or 'unknown'} is not accepted (accepted: {', '.join(sorted(formats))})", item=item)
    width, height = im.size
    if width <= 0 or height <= 0:
        raise invalid(f"image has no pixels ({width}x{height})", item=item)
    if width * height > max_pixels:
        raise PreprocessError(
            Code.RESOURCE_EXHAUSTED,
            f"image is {width}x{height} = {width * height} pixels, over the limit of {max_pixels} (max_image_pixels)",
            item=item,
        )
    if _wider_than_8_bits(im):
        raise invalid(f"{fmt} image in mode {im.mode} has more than 8 bits per sample; send an 8-bit image", item=item)
    try:
        # A PNG's getexif decodes the image when its EXIF is not in the header chunks.
        if fmt == "PNG" and "exif" not in im.info:
            orientation = _png_orientation(data, im)
        else:
            orientation = im.getexif().get(_ORIENTATION, 1)
        if orientation in _SWAPS_SIDES:
            width, height = height, width
    except Exception as e:
        raise invalid(f"corrupt or truncated {fmt} image: {_reason(e)}", item=item) from None
    return ImageHeader(im, fmt, height, width, item)


def decode_pixels(header: ImageHeader, *, transparency: str = "white") -> DecodedImage:
    """Decode an opened image: EXIF orientation applied, transparency composited onto
    white (or kept as RGBA with ``transparency="keep"``, see ``TRANSPARENCY``)."""
    if transparency not in TRANSPARENCY:
        raise ValueError(f"transparency must be one of {TRANSPARENCY}, got {transparency!r}")
    im = header.image
    try:
        lent = lend_rgbx(im)  # an RGB JPEG: decoded into an array of our own
        im.load()
        if im.getexif().get(_ORIENTATION, 1) in range(2, 9):
            im, lent = ImageOps.exif_transpose(im), None
        if transparency == "keep" and im.has_transparency_data:
            return DecodedImage(_rgba_pixels(im), alpha=True)
        pixels = lent if lent is not None else _rgb_pixels(im)
    except PreprocessError:
        raise
    except Exception as e:
        raise invalid(f"corrupt or truncated {header.format} image: {_reason(e)}", item=header.item) from None
    return DecodedImage(pixels)


_PNG_TEXT_CHUNKS = (b"eXIf", b"tEXt", b"zTXt", b"iTXt")
_PNG_DATA_CHUNKS = (b"IDAT", b"DDAT", b"fdAT")


def _png_orientation(data: bytes, im: Image.Image) -> int:
    """The EXIF orientation Pillow finds in a PNG once it has decoded it (``getexif`` after
    ``load``), without decoding: its ``info`` is the header chunks' plus what ``load_end``
    adds from the chunks after the image data. Those chunks are found by walking the
    chunk headers (the image data is skipped by length) and read with Pillow's own
    handlers, in ``load_end``'s order and with its stopping rules, into a copy of the
    header's info; an image holding that info answers ``getexif`` as the decoded one will.
    An animated PNG is read up to the next frame's fcTL, where ``load_end`` stops."""
    info = dict(im.info)
    tile = getattr(im, "tile", None) or ()
    animated = bool(getattr(im, "is_animated", False))
    if tile and _any_text_after(data, tile[0][2]):
        _read_chunks_after_data(data, tile[0][2] - 8, info, animated)
    probe = Image.new("L", (1, 1))
    probe.info = info
    return probe.getexif().get(_ORIENTATION, 1)


def _any_text_after(data: bytes, start: int) -> bool:
    """Whether a chunk that can carry EXIF or XMP may follow ``start`` (a byte search:
    a match inside compressed data only costs the exact walk)."""
    return any(data.find(cid, start) >= 0 for cid in _PNG_TEXT_CHUNKS)


def _read_chunks_after_data(data: bytes, first: int, info: dict, animated: bool) -> None:
    """``PngImageFile.load_end`` on ``data``: the chunks after the run of image-data
    chunks that starts with the chunk header at ``first``, handled by a ``PngStream``
    whose info is ``info``, up to IEND (an animated PNG: the next fcTL) or the first
    chunk it cannot read."""
    from PIL import PngImagePlugin

    n = len(data)
    pos = first
    while pos + 8 <= n:  # skip the image data (IDAT, and DDAT / fdAT as load_read does)
        length = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] not in _PNG_DATA_CHUNKS:
            break
        pos += 12 + length
    else:
        return
    fp = io.BytesIO(data)
    stream = PngImagePlugin.PngStream(fp)
    stream.im_info = info
    fp.seek(pos)
    while True:
        try:
            cid, chunk_pos, length = stream.read()
        except (struct.error, SyntaxError):
            break
        if cid == b"IEND" or (cid == b"fcTL" and animated):
            break
        try:
            stream.call(cid, chunk_pos, length)
        except UnicodeDecodeError:
            break
        except EOFError:  # image data again (IDAT raises it), skipped as load_end does
            fp.seek(chunk_pos + length)
        except AttributeError:  # a chunk Pillow has no handler for
            fp.seek(chunk_pos + length)
        fp.read(4)  # CRC
        if fp.tell() > n:
            break


def _pillow_bomb_limit_at_least(max_pixels: int) -> None:
    """Pillow refuses in ``Image.open`` anything over ``2 * Image.MAX_IMAGE_PIXELS``
    (and warns, which we make an error, over ``MAX_IMAGE_PIXELS``). Raise that global,
    never lower it, so a configured ``max_pixels`` above Pillow's default (89M) is the
    limit that applies: whenever Pillow's check fires, the image is over ours too."""
    current = Image.MAX_IMAGE_PIXELS
    if current is not None and current < max_pixels:
        Image.MAX_IMAGE_PIXELS = max_pixels


def _reason(e: Exception) -> str:
    """Pillow's message without object reprs (``<_io.BytesIO object at 0x...>``)."""
    text = re.sub(r"\s*<[^<>]* object at 0x[0-9a-f]+>", "", str(e)).strip()
    return text or type(e).__name__


def _rgb_pixels(im: Image.Image) -> np.ndarray:
    """transformers' ``convert_to_rgb`` for PIL images (alpha composited onto white), as
    Pillow's RGBX buffer in place, or packed RGB where Pillow cannot export it."""
    if "A" in im.getbands() or im.info.get("transparency") is not None:
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        im = Image.alpha_composite(background, rgba).convert("RGB")
    elif im.mode != "RGB":
        im = im.convert("RGB")
    view = rgbx_view(im)
    return view if view is not None else _rgb_array(im)


def _rgba_pixels(im: Image.Image) -> np.ndarray:
    """``im.convert("RGBA")`` (what a processor that keeps transparency takes), as
    Pillow's buffer read in place where it can be, else copied."""
    rgba = im if im.mode == "RGBA" else im.convert("RGBA")
    view = rgba_view(rgba)
    return view if view is not None else np.array(rgba)


_CHUNK = 1 << 20


def _rgb_array(im: Image.Image) -> np.ndarray:
    """Packed pixels, for an image whose buffer cannot be read in place (``pillow_buffer``).
    ``np.asarray(im)`` would go through ``tobytes``, which collects 64 KiB chunks and joins
    them (two copies, and a second full-size buffer alive at the peak); here Pillow's raw
    encoder (the one ``tobytes`` uses) fills the array in 1 MiB runs of whole rows."""
    w, h = im.size
    out = np.empty((h, w, 3), np.uint8)
    flat = out.reshape(-1)
    encoder = Image._getencoder("RGB", "raw", "RGB")
    try:
        encoder.setimage(im.im, (0, 0, w, h))
        pos = 0
        while True:
            _, errcode, data = encoder.encode(max(_CHUNK, w * 4))
            flat[pos:pos + len(data)] = np.frombuffer(data, np.uint8)
            pos += len(data)
            if errcode:
                break
    finally:
        encoder.cleanup()
    if errcode < 0 or pos != flat.size:
        raise RuntimeError(f"raw encoder error {errcode} after {pos} of {flat.size} bytes")
    # Writeable, unlike np.asarray(im): numba compiles every kernel once more for
    # read-only arrays, and that second set was half of a cold start.
    return out
