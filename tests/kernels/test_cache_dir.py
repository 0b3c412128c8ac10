"""The kernels' numba cache is keyed by all kernel sources: numba itself checks only a
function's own file, though a cached kernel embeds the code of kernels it calls."""

from __future__ import annotations

import shutil
from pathlib import Path

import sglang_mm_grpc.kernels as kernels
from sglang_mm_grpc.kernels import cache_dir

SOURCES = Path(kernels.__file__).resolve().parent


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "kernels"
    dst.mkdir()
    for f in SOURCES.glob("*.py"):
        shutil.copy(f, dst / f.name)
    return dst


def test_the_loaded_kernels_use_the_digest_directory():
    from sglang_mm_grpc.kernels import resample_pil

    assert kernels.CACHE_DIR == cache_dir(SOURCES) and Path(kernels.CACHE_DIR).name.startswith("numba-")
    resample_pil.warmup()
    (dispatcher,) = [resample_pil.horizontal_pass]
    assert dispatcher._cache._cache_path == kernels.CACHE_DIR


def test_editing_any_kernel_source_moves_the_cache(tmp_path):
    copy = _copy(tmp_path)
    env: dict = {}
    before = cache_dir(copy, env)
    assert before == cache_dir(copy, env) == str(copy / "__pycache__" / Path(before).name)
    assert Path(before).name == Path(cache_dir(SOURCES, env)).name  # same sources, same key
    normalize = copy / "normalize.py"
    normalize.write_text(normalize.read_text() + "\n# edited\n")
    assert cache_dir(copy, env) != before


def test_numba_cache_dir_is_respected(tmp_path):
    copy = _copy(tmp_path)
    name = Path(cache_dir(copy, {})).name
    assert cache_dir(copy, {"NUMBA_CACHE_DIR": str(tmp_path / "nc")}) == str(tmp_path / "nc" / name)
