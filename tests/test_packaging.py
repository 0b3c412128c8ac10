"""A normal (non-editable) install ships everything: kernels mapped into the package,
presets, generated protos; and it preprocesses from the installed location."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contents_and_install(tmp_path):
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)]
    if importlib.util.find_spec("setuptools") is not None:
        cmd.insert(4, "--no-build-isolation")
    subprocess.run(cmd, check=True, capture_output=True)
    (wheel,) = tmp_path.glob("sglang_mm_grpc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for kernel in (ROOT / "kernels").glob("*.py"):
        assert f"sglang_mm_grpc/kernels/{kernel.name}" in names
    for preset in (ROOT / "sglang_mm_grpc/config/presets").glob("*.json"):
        assert f"sglang_mm_grpc/config/presets/{preset.name}" in names
    assert "sglang_mm_grpc/_proto/sglang_mm/v1/preprocessor_pb2.py" in names
    assert not any(n.startswith(("kernels/", "sglang/", "vllm/", "trtllm/", "tests/")) for n in names)

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    probe = (
        "import sys; sys.path.insert(0, %r)\n"
        "import sglang_mm_grpc, sglang_mm_grpc.kernels as k\n"
        "assert sglang_mm_grpc.__file__.startswith(%r), sglang_mm_grpc.__file__\n"
        "assert k.__file__.startswith(%r), k.__file__\n"
        "import io, numpy as np; from PIL import Image\n"
        "b = io.BytesIO(); Image.new('RGB', (60, 40), (1, 2, 3)).save(b, 'PNG')\n"
        "from sglang_mm_grpc import Preprocessor\n"
        "out = Preprocessor.from_model('Qwen/Qwen2-VL-7B-Instruct').preprocess([b.getvalue()])\n"
        "print(out.pixel_values.shape, out.token_counts)\n"
    ) % (str(target), str(target), str(target))
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "(24, 1176) [6]" in res.stdout
