"""After ``warmup`` no request compiles anything (nor loads a compiled kernel from the
disk cache): every preset, images of the kinds requests bring (JPEG, PNG with alpha,
grayscale, palette, sizes on every resize path)."""

from __future__ import annotations

import gc

import pytest
from numba.core.dispatcher import Dispatcher

import imagegen
from sglang_mm_grpc import Preprocessor


def _compiled() -> dict[str, int]:
    """Compiled signatures per numba function alive in this process."""
    return {
        f"{d.py_func.__module__}.{d.py_func.__qualname__}@{id(d)}": len(d.overloads)
        for d in gc.get_objects()
        if issubclass(type(d), Dispatcher)  # type(): objects whose __class__ lookup raises (numpy's BagObj)
    }


def _images() -> list[bytes]:
    from PIL import Image

    rgba = Image.fromarray(imagegen.pixels(90, 70, seed=3, channels=4), "RGBA")
    gray = Image.fromarray(imagegen.pixels(50, 400, seed=4)[:, :, 0], "L")
    return [
        imagegen.jpeg(480, 640, seed=1),
        imagegen.jpeg(1080, 1920, seed=2),
        imagegen.png(333, 77, seed=5),
        imagegen.encode(rgba, "PNG"),
        imagegen.encode(gray, "PNG"),
        imagegen.encode(gray.convert("P"), "PNG"),
    ]


@pytest.mark.parametrize("model", imagegen.image_presets())
def test_no_request_compiles_after_warmup(model):
    pp = Preprocessor.from_model(model, cache_bytes=0)
    pp.warmup()
    images = _images()
    before = _compiled()
    for raw in images:
        pp.preprocess([raw])
    pp.preprocess(images[:3])
    after = _compiled()
    grown = {k: (before.get(k, 0), n) for k, n in after.items() if n != before.get(k, 0)}
    assert not grown, f"kernels compiled or loaded during requests (before, after): {grown}"


def test_the_check_sees_a_compilation():
    """A kernel first called with a new array type is counted."""
    import numpy as np

    from sglang_mm_grpc.kernels import resample_pil

    before = _compiled()
    resample_pil.resize(np.zeros((5, 7, 3), np.uint8), 3, 4, resample_pil.BICUBIC)
    resample_pil._premultiply(np.zeros((2, 2, 4), np.uint8)[:, ::-1])  # a strided layout, never warmed
    after = _compiled()
    assert any(n != before.get(k, 0) for k, n in after.items())
