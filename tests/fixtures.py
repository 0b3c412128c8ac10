"""Committed reference fixtures: outputs of the real torch/transformers code, so machines
without torch (CI) still check the torchvision-exact paths.

``scripts/gen_fixtures.py`` writes one JSON file per set, ``tests/fixtures/<set>.json``:

    {"set": name, "doc": ..., "versions": {"torch": ..., ...},
     "cases": [{"id": ..., "input": RECIPE, "input_sha256": ..., "params": {...},
                "outputs": {name: {"shape": [...], "dtype": "float32", "sha256": ...,
                                   "data": base64 (small outputs only)}}}]}

An input is never stored: a RECIPE (a small dict) says how ``build_input`` regenerates
it from ``imagegen``'s seeded generators, and ``input_sha256`` proves it came out the
same. Outputs are stored as a digest of their bytes (shape, dtype, sha256), plus the
bytes themselves when small, so a mismatch can say how far off it is.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np

import imagegen

FIXTURE_DIR = Path(__file__).parent / "fixtures"
#: Outputs up to this many bytes are stored in full (zlib + base64).
INLINE_BYTES = 1024


# -- inputs -----------------------------------------------------------------------------


def build_input(recipe: dict):
    """RECIPE -> the input it names (a numpy array or encoded image bytes).

    ``{"make": "pixels", "h", "w", "seed", "kind", "channels"}``: ``imagegen.pixels``
    ``{"make": "png" | "jpeg", "h", "w", "seed", "kind"}``: ``imagegen.png`` / ``jpeg``
    ``{"make": "mode", "name", "h"?, "w"?}``: one entry of ``imagegen.modes_corpus``
    ``{"make": "normal_f32", "shape", "seed", "scale"}``: float32 standard normal * scale
    ``{"make": "float32_bits", "n", "seed"}``: float32 from uniformly random bit patterns
    ``{"make": "float32_values", "bits": [uint32, ...]}``: float32 with exactly these bits
    ``{"make": "uint8_values"}``: uint8 [3, 256], each row 0..255 (what LUTs are made of)
    ``{"make": "list", "items": [RECIPE, ...]}``: a list (several images in one request)
    """
    make = recipe["make"]
    if make == "list":
        return [build_input(r) for r in recipe["items"]]
    if make == "float32_values":
        return np.array(recipe["bits"], dtype=np.uint32).view(np.float32)
    if make == "uint8_values":
        return np.tile(np.arange(256, dtype=np.uint8), (3, 1))
    if make == "pixels":
        return imagegen.pixels(recipe["h"], recipe["w"], recipe["seed"], recipe["kind"], recipe.get("channels", 3))
    if make == "png":
        return imagegen.png(recipe["h"], recipe["w"], recipe["seed"], recipe["kind"])
    if make == "jpeg":
        return imagegen.jpeg(recipe["h"], recipe["w"], recipe["seed"], recipe["kind"])
    if make == "mode":
        return _modes(recipe.get("h", 61), recipe.get("w", 87))[recipe["name"]]
    if make == "normal_f32":
        rng = np.random.default_rng(recipe["seed"])
        return (rng.standard_normal(tuple(recipe["shape"])) * recipe.get("scale", 1.0)).astype(np.float32)
    if make == "float32_bits":
        rng = np.random.default_rng(recipe["seed"])
        return rng.integers(0, 2**32, recipe["n"], dtype=np.uint64).astype(np.uint32).view(np.float32)
    raise ValueError(f"unknown input recipe {recipe!r}")


@lru_cache(maxsize=4)
def _modes(h: int, w: int) -> dict[str, bytes]:
    return imagegen.modes_corpus(h, w)


def input_digest(value) -> str:
    """sha256 of an input: array bytes, or for encoded images the decoded samples (what
    the processors see; encoder byte streams may differ across library builds)."""
    if isinstance(value, list):
        return hashlib.sha256("".join(input_digest(v) for v in value).encode()).hexdigest()
    if isinstance(value, (bytes, bytearray)):
        from PIL import Image

        with Image.open(io.BytesIO(value)) as im:
            return _sha(np.asarray(im))
    return _sha(np.asarray(value))


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


# -- outputs ----------------------------------------------------------------------------


def digest(a: np.ndarray, inline_bytes: int = INLINE_BYTES) -> dict:
    """An output as stored: shape, dtype, sha256 of the C-order bytes (+ data if small)."""
    a = np.ascontiguousarray(a)
    out = {"shape": list(a.shape), "dtype": a.dtype.name, "sha256": _sha(a)}
    if a.nbytes <= inline_bytes:
        out["data"] = base64.b64encode(zlib.compress(a.tobytes(), 9)).decode()
    return out


def stored_array(expected: dict) -> np.ndarray | None:
    """The stored output itself, when it was small enough to keep."""
    if "data" not in expected:
        return None
    raw = zlib.decompress(base64.b64decode(expected["data"]))
    return np.frombuffer(raw, dtype=expected["dtype"]).reshape(expected["shape"])


def mismatch(ours: np.ndarray, expected: dict) -> str | None:
    """None when ``ours`` is exactly the stored output, else what differs."""
    ours = np.asarray(ours)
    if list(ours.shape) != expected["shape"] or ours.dtype.name != expected["dtype"]:
        return f"got {ours.dtype.name}{list(ours.shape)}, want {expected['dtype']}{expected['shape']}"
    if _sha(ours) == expected["sha256"]:
        return None
    ref = stored_array(expected)
    if ref is None:
        return "same shape and dtype, different bytes"
    a = np.ascontiguousarray(ours).view(np.uint8)
    b = np.ascontiguousarray(ref).view(np.uint8)
    diff = ours != ref if ours.dtype.kind != "f" else ours.view(f"u{ours.itemsize}") != ref.view(f"u{ref.itemsize}")
    return f"{int(np.count_nonzero(diff))} of {ours.size} values differ ({int(np.count_nonzero(a != b))} bytes)"


def assert_output(ours: np.ndarray, expected: dict, what: str = "") -> None:
    problem = mismatch(ours, expected)
    assert problem is None, f"{what}: {problem}" if what else problem


# -- sets -------------------------------------------------------------------------------


def path(name: str) -> Path:
    return FIXTURE_DIR / f"{name}.json"


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    return json.loads(path(name).read_text())


def cases(name: str) -> list[dict]:
    return load(name)["cases"]


def params(name: str):
    """The set's cases as pytest params with their ids (for ``parametrize``)."""
    import pytest

    return [pytest.param(c, id=c["id"]) for c in cases(name)]


def generator():
    """``scripts/gen_fixtures.py`` as a module (generating needs torch)."""
    import sys

    scripts = str(Path(__file__).resolve().parents[1] / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import gen_fixtures

    return gen_fixtures


def case_input(case: dict):
    """Rebuild a case's input and check it is the one the fixture was made from."""
    value = build_input(case["input"])
    got = input_digest(value)
    assert got == case["input_sha256"], (
        f"input recipe {case['input']} no longer builds the fixture's input (generator or "
        "decoder changed): regenerate with scripts/gen_fixtures.py"
    )
    return value
