"""Deterministic test images, encoded the way clients send them.

Content is either noise (the hardest case for resampling: every rounding shows) or a
smooth gradient with detail (photo-like). Nothing here is an expected output: the
expected values always come from running the reference on the same bytes.
"""

from __future__ import annotations

import functools
import io

import numpy as np
from PIL import Image


def pixels(h: int, w: int, seed: int = 0, kind: str = "noise", channels: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "noise":
        a = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
    else:
        y = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
        x = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
        phase = rng.uniform(0, 6.28, (1, 1, channels)).astype(np.float32)
        a = 127.5 + 100 * np.sin(7 * x + 5 * y + phase) + 20 * rng.standard_normal((h, w, channels)).astype(np.float32)
        a = np.clip(a, 0, 255).astype(np.uint8)
    return a[..., 0] if channels == 1 else a


def encode(im: Image.Image, fmt: str, **save) -> bytes:
    b = io.BytesIO()
    im.save(b, fmt, **save)
    return b.getvalue()


#: The last images made, kept: a suite parametrized by preset asks for the same (large,
#: seconds to make) images once per preset.
_RECENT = 32


@functools.lru_cache(maxsize=_RECENT)
def png(h: int, w: int, seed: int = 0, kind: str = "noise") -> bytes:
    return encode(Image.fromarray(pixels(h, w, seed, kind)), "PNG", compress_level=1)


@functools.lru_cache(maxsize=_RECENT)
def jpeg(h: int, w: int, seed: int = 0, kind: str = "smooth", **save) -> bytes:
    save.setdefault("quality", 90)
    return encode(Image.fromarray(pixels(h, w, seed, kind)), "JPEG", **save)


def with_exif_orientation(h: int, w: int, orientation: int, seed: int = 0) -> bytes:
    im = Image.fromarray(pixels(h, w, seed, "smooth"))
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(im, "JPEG", quality=92, exif=exif.tobytes())


def modes_corpus(h: int = 61, w: int = 87) -> dict[str, bytes]:
    """One image per Pillow mode / format variant the decoder must handle like HF."""
    rgb = pixels(h, w, 1, "smooth")
    noise = pixels(h, w, 2, "noise")
    alpha = pixels(h, w, 3, "noise", channels=1)
    rgba = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
    out = {
        "png_rgb": encode(Image.fromarray(noise), "PNG"),
        "png_rgba": encode(rgba, "PNG"),
        "png_l": encode(Image.fromarray(rgb[..., 0]), "PNG"),
        "png_la": encode(rgba.convert("LA"), "PNG"),
        "png_1": encode(Image.fromarray(rgb[..., 0]).convert("1"), "PNG"),
        "png_p": encode(Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=64), "PNG"),
        "jpeg_baseline_420": encode(Image.fromarray(rgb), "JPEG", quality=85, subsampling=2),
        "jpeg_444": encode(Image.fromarray(rgb), "JPEG", quality=95, subsampling=0),
        "jpeg_progressive": encode(Image.fromarray(rgb), "JPEG", quality=80, progressive=True),
        "jpeg_gray": encode(Image.fromarray(rgb[..., 0]), "JPEG"),
        "jpeg_cmyk": encode(Image.fromarray(rgb).convert("CMYK"), "JPEG"),
        "webp_lossy": encode(Image.fromarray(rgb), "WEBP", quality=80),
        "webp_lossless_rgba": encode(rgba, "WEBP", lossless=True),
        "bmp": encode(Image.fromarray(noise), "BMP"),
        "bmp_p": encode(Image.fromarray(rgb).convert("P"), "BMP"),
        "tiny_1x1_png": encode(Image.fromarray(noise[:1, :1]), "PNG"),
    }
    p = Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    out["png_p_transparency"] = encode(p, "PNG", transparency=3)
    frames = [Image.fromarray(pixels(h, w, s, "smooth")).convert("P") for s in (5, 6, 7)]
    out["gif_animated"] = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)
    out["gif_transparent"] = encode(frames[1], "GIF", transparency=0)
    webp_frames = [Image.fromarray(pixels(h, w, s, "smooth")) for s in (8, 9)]
    out["webp_animated"] = encode(webp_frames[0], "WEBP", save_all=True, append_images=webp_frames[1:])
    for o in range(1, 9):
        out[f"jpeg_exif_orientation_{o}"] = with_exif_orientation(h, w, o, seed=10 + o)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated: the alpha turns with the colours
    out["png_rgba_exif_orientation_6"] = encode(rgba, "PNG", exif=exif.tobytes())
    return out


def sixteen_bit_png_rgb(h: int = 5, w: int = 7) -> bytes:
    """A 48-bit RGB PNG (Pillow opens it as 8-bit RGB, silently truncating)."""
    import struct
    import zlib

    raw = b"".join(b"\x00" + bytes(range(6)) * w for _ in range(h))

    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def image_presets() -> list[str]:
    """The built-in presets whose model takes images: all but the audio-only ones (whose
    preprocessor_config names a feature extractor, no image processor)."""
    from sglang_mm_grpc.config import preset_names, resolve

    return [p for p in preset_names() if "image_processor_type" in resolve(p).preprocessor_config]
