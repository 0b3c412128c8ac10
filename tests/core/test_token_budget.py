"""The token budget: the most tokens one image may expand into, per model and per request.

An image over it is refused with RESOURCE_EXHAUSTED naming the image, its token count
and the budget, planned from the image header alone: its pixels are never decoded (the
peak RSS of a refused 12-megapixel photo does not move). Every family is held to it.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import imagegen
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.pipeline import driver
from sglang_mm_grpc.pipeline.driver import DEFAULT_MAX_IMAGE_TOKENS
from sglang_mm_grpc.media.decode import decode_image, open_image

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
INKLING = "thinkingmachines/Inkling"


def _refusal(pp, raws, **kwargs) -> PreprocessError:
    with pytest.raises(PreprocessError) as e:
        pp.preprocess(raws, **kwargs)
    return e.value


@pytest.mark.parametrize("model", imagegen.image_presets())
def test_the_default_budget_takes_a_12_megapixel_photo(model):
    """4032x3024 either way up, as a phone camera takes it, fits every preset."""
    pp = Preprocessor.from_model(model, cache_bytes=0)
    assert pp.max_image_tokens == DEFAULT_MAX_IMAGE_TOKENS == pp.info["max_image_tokens"]
    for h, w in ((3024, 4032), (4032, 3024)):
        assert pp.family.plan(h, w, 0).token_count <= DEFAULT_MAX_IMAGE_TOKENS, (model, h, w)


def test_the_default_bounds_a_family_that_never_downscales():
    """Inkling keeps every pixel: a 48 MP photo is over the default (Qwen downscales it)."""
    assert Preprocessor.from_model(INKLING).family.plan(6000, 8000, 0).token_count > DEFAULT_MAX_IMAGE_TOKENS
    assert Preprocessor.from_model(QWEN2).family.plan(6000, 8000, 0).token_count <= DEFAULT_MAX_IMAGE_TOKENS


@pytest.mark.parametrize("model", imagegen.image_presets())
def test_every_family_refuses_an_image_over_the_budget(model):
    """An image of a request expands into more tokens than the budget: the request fails,
    the message names the image, its size, its count, the budget and who set it (image 1,
    the larger; image 0 too in a family whose count does not depend on the size)."""
    small, big = imagegen.png(20, 30, seed=1), imagegen.png(900, 1300, seed=2)
    probe = Preprocessor.from_model(model, cache_bytes=0)
    tokens = probe.family.plan(900, 1300, 1).token_count
    fits = probe.family.plan(20, 30, 0).token_count
    assert fits <= tokens
    pp = Preprocessor.from_model(model, cache_bytes=0, max_image_tokens=tokens - 1)
    e = _refusal(pp, [small, big])
    item, size, count = (1, "1300x900", tokens) if fits < tokens else (0, "30x20", fits)
    assert e.code is Code.RESOURCE_EXHAUSTED and e.item == item
    assert e.message == (f"image {item}: {size} image expands into {count} tokens, over the budget of {tokens - 1} "
                         "tokens per image (the model's max_image_tokens); not decoded")
    assert Preprocessor.from_model(model, cache_bytes=0, max_image_tokens=tokens).preprocess([small, big])


def test_a_request_lowers_the_budget_never_raises_it():
    pp = Preprocessor.from_model(QWEN2, cache_bytes=0, max_image_tokens=400)
    raw = imagegen.png(300, 500, seed=3)
    tokens = pp.family.plan(300, 500, 0).token_count  # 192
    assert pp.preprocess([raw], max_image_tokens=tokens).token_counts == [tokens]
    assert pp.preprocess([raw], max_image_tokens=0).token_counts == [tokens]  # 0: the model's
    e = _refusal(pp, [raw], max_image_tokens=tokens - 1)
    assert e.code is Code.RESOURCE_EXHAUSTED
    assert f"{tokens} tokens, over the budget of {tokens - 1}" in e.message and "the request's" in e.message
    big = imagegen.png(600, 900, seed=4)
    e = _refusal(pp, [big], max_image_tokens=10**6)  # above the model's: the model's applies
    assert "over the budget of 400 tokens per image (the model's max_image_tokens)" in e.message
    assert pp.token_budget(10**6) == (400, "the model's max_image_tokens")


def test_a_cached_image_is_held_to_the_request_budget():
    pp = Preprocessor.from_model(QWEN2)
    raw = imagegen.png(300, 500, seed=5)
    tokens = pp.preprocess([raw]).token_counts[0]
    assert pp.cache.stats.items == 1
    e = _refusal(pp, [raw], max_image_tokens=tokens - 1)
    assert e.code is Code.RESOURCE_EXHAUSTED and f"{tokens} tokens" in e.message


def test_the_refusal_comes_before_any_pixel_is_decoded(monkeypatch):
    decoded = []
    real = driver.decode_pixels
    monkeypatch.setattr(driver, "decode_pixels", lambda header, **kw: decoded.append(header.item) or real(header, **kw))
    pp = Preprocessor.from_model(INKLING, cache_bytes=0, max_image_tokens=100)
    raws = [imagegen.png(40, 80, seed=6), imagegen.jpeg(1000, 800, seed=7)]
    e = _refusal(pp, raws)
    assert e.item == 1 and "not decoded" in e.message
    assert 1 not in decoded


def test_the_header_size_is_the_oriented_one():
    """EXIF orientations 5..8 swap the sides, known from a JPEG's header."""
    for orientation in range(1, 9):
        raw = imagegen.with_exif_orientation(30, 50, orientation, seed=orientation)
        header = open_image(raw, item=0)
        img = decode_image(raw, item=0)
        assert (header.height, header.width) == (img.height, img.width) == ((50, 30) if orientation > 4 else (30, 50))


def _png_with_late_exif(h: int, w: int, orientation: int) -> bytes:
    """A PNG whose eXIf chunk follows the image data: Pillow learns the orientation only
    when it decodes the pixels (``open_image`` reads it from the chunks without decoding)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    raw = imagegen.encode(Image.fromarray(imagegen.pixels(h, w, seed=8)), "PNG", exif=exif.tobytes())
    chunks, pos = [], 8
    while pos < len(raw):
        (n,) = struct.unpack(">I", raw[pos:pos + 4])
        chunks.append(raw[pos:pos + 12 + n])
        pos += 12 + n
    late = [c for c in chunks if c[4:8] == b"eXIf"]
    rest = [c for c in chunks if c[4:8] != b"eXIf"]
    assert len(late) == 1 and rest[-1][4:8] == b"IEND"
    return raw[:8] + b"".join(rest[:-1] + late + rest[-1:])


def test_an_orientation_after_the_image_data_is_known_from_the_header():
    raw = _png_with_late_exif(40, 130, 6)
    header = open_image(raw, item=0)
    assert (header.height, header.width) == (130, 40)  # the eXIf chunk read, the pixels not
    pp = Preprocessor.from_model(INKLING, cache_bytes=0)
    out = pp.preprocess([raw])
    assert (out.images[0].height, out.images[0].width) == (130, 40)
    assert out.token_counts == [pp.family.plan(130, 40, 0).token_count] == [4 * 2]
    # and the budget applies to the oriented size (8 tokens; 4 * 1 as stored), before decoding
    e = _refusal(pp, [raw], max_image_tokens=7)
    assert "40x130 image expands into 8 tokens, over the budget of 7" in e.message
    assert e.message.endswith("not decoded")


_MEASURE = """
import re, sys
from pathlib import Path
import numpy as np
from PIL import Image
sys.path.insert(0, sys.argv[1])
import imagegen
from sglang_mm_grpc import Preprocessor, PreprocessError
from sglang_mm_grpc.media.decode import decode_image

def status(field):
    return int(re.search(rf"^{field}:\\s+(\\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) << 10

def peak_growth(fn):
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) restarts at the current RSS
    before = status("VmRSS")
    fn()
    return status("VmHWM") - before

photo = Image.fromarray(np.tile(imagegen.pixels(63, 64, seed=9, kind="smooth"), (48, 63, 1)))
raw = imagegen.encode(photo, "JPEG", quality=85)
pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct", cache_bytes=0, max_image_tokens=1000)

def refused():
    for _ in range(5):
        try:
            pp.preprocess([raw])
        except PreprocessError as e:
            assert "4032x3024 image expands into 15552 tokens, over the budget of 1000" in e.message, e.message
        else:
            raise AssertionError("not refused")

refused()  # first-call allocations out of the way
print(peak_growth(refused), peak_growth(lambda: decode_image(raw, item=0)))
"""


def test_a_refused_12_megapixel_photo_adds_no_memory():
    """Refused from its header, a 4032x3024 JPEG (48 MB as decoded RGBX) leaves the peak
    RSS where it was; decoding the same bytes, as a check on the measurement, raises it.
    Measured in a fresh process, whose heap no other test has shaped."""
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("no /proc/self/clear_refs to reset the peak RSS")
    tests = str(Path(__file__).resolve().parents[1])
    r = subprocess.run([sys.executable, "-c", _MEASURE, tests], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    refused, decoded = map(int, r.stdout.split())
    assert refused < 8 << 20, f"peak RSS grew {refused >> 20} MiB for a refused image"
    assert decoded > 40 << 20, f"decoding the photo raised the peak only {decoded >> 20} MiB"


def test_local_cli_takes_the_budget(tmp_path, capsys):
    """``preprocess --max-image-tokens N`` in-process: the model's budget for the run."""
    from sglang_mm_grpc.cli.commands import main

    img = tmp_path / "a.png"
    img.write_bytes(imagegen.png(40, 80, seed=10))  # Inkling: 1 row of 80 // 40 + 1 = 3 patches
    assert main(["preprocess", "--model", INKLING, "--max-image-tokens", "2", str(img)]) == 1
    assert f"RESOURCE_EXHAUSTED: image 0 ({img}): 80x40 image expands into 3 tokens, over the budget of 2" in capsys.readouterr().err
    out = tmp_path / "out.npz"
    assert main(["preprocess", "--model", INKLING, "--max-image-tokens", "3", "--out", str(out), str(img)]) == 0
    with np.load(out) as z:
        assert z["pixel_values"].shape == (3, 2, 40, 40, 3) and z["num_patches"].tolist() == [3]
