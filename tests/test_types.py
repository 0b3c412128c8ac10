"""The package type-checks: mypy, with the checked-in ``[tool.mypy]`` of pyproject.toml, finds
no error in ``sglang_mm_grpc`` and its kernels.

The kernels install as ``sglang_mm_grpc.kernels`` from the top-level ``kernels/`` folder
(``[tool.setuptools] package-dir``), a mapping mypy cannot read from the editable
install's import hook; the config's ``mypy_path`` finds them through
``build/mypy/sglang_mm_grpc/kernels``, a link to ``kernels/`` this test makes (``build/`` is
ignored by git). ``python tests/test_types.py [mypy options]`` makes it and runs the same check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where the config's mypy_path shows kernels/ as the package's own subpackage.
LINK = ROOT / "build" / "mypy" / "sglang_mm_grpc" / "kernels"


def link_kernels() -> None:
    """``build/mypy/sglang_mm_grpc/kernels`` -> ``kernels/`` (kept once made)."""
    if LINK.is_symlink() and LINK.resolve() == (ROOT / "kernels").resolve():
        return
    LINK.parent.mkdir(parents=True, exist_ok=True)
    if LINK.is_symlink():
        LINK.unlink()  # a stale link (it points elsewhere)
    try:
        LINK.symlink_to(os.path.relpath(ROOT / "kernels", LINK.parent), target_is_directory=True)
    except FileExistsError:  # another run made it meanwhile
        pass


def run_mypy(*args: str) -> subprocess.CompletedProcess[str]:
    link_kernels()
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
           "--cache-dir", str(ROOT / ".mypy_cache"), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)


def by_folder(output: str) -> dict[str, int]:
    """Errors per folder of the package (``kernels`` for the kernels, wherever mypy found them)."""
    counts: Counter[str] = Counter()
    for path in re.findall(r"^(\S+?\.pyi?):\d+: error:", output, re.M):
        parts = Path(path).parts
        counts["kernels" if "kernels" in parts else parts[1] if len(parts) > 2 else path] += 1
    return dict(sorted(counts.items()))


def test_mypy_is_clean():
    r = run_mypy()
    output = r.stdout + r.stderr
    assert r.returncode == 0, (f"mypy found errors (by folder: {by_folder(output)}); "
                               f"run `python tests/test_types.py` to see them:\n{output}")


if __name__ == "__main__":
    done = run_mypy(*sys.argv[1:])
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)
