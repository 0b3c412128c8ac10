"""A normal (non-editable) install, from one wheel built once for this module: it ships
everything (the kernels mapped into the package, presets, the generated protos), no
.proto file and no top-level ``sglang``, ``vllm`` or ``trtllm`` package that would shadow
the real ones; it preprocesses from the installed location, and its server answers
health and reflection (the descriptors compiled into it and into smg-grpc-proto)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from servers import REPO

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]

PREPROCESS = r"""
import io, sys
import sglang_mm_grpc, sglang_mm_grpc.kernels as k
assert sglang_mm_grpc.__file__.startswith(sys.argv[1]), sglang_mm_grpc.__file__
assert k.__file__.startswith(sys.argv[1]), k.__file__
from PIL import Image
b = io.BytesIO(); Image.new('RGB', (60, 40), (1, 2, 3)).save(b, 'PNG')
from sglang_mm_grpc import Preprocessor
out = Preprocessor.from_model('Qwen/Qwen2-VL-7B-Instruct').preprocess([b.getvalue()])
print(out.pixel_values.shape, out.token_counts)
"""

SERVE = r"""
import asyncio, sys
import sglang_mm_grpc
assert sglang_mm_grpc.__file__.startswith(sys.argv[1]), sglang_mm_grpc.__file__
import importlib.util
for name in ("sglang", "vllm", "trtllm", "sglang_mm"):
    assert importlib.util.find_spec(name) is None, name
from sglang_mm_grpc.server import Server, ServerConfig

async def main():
    server = Server(ServerConfig(port=0))
    port = await server.start()  # listening, models not loaded: health NOT_SERVING
    print(port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of what the package is made of (no caches, no checkout extras)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    for d in ("sglang_mm_grpc", "kernels"):
        shutil.copytree(REPO / d, src / d, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", src)
    (src / "README.md").write_text((REPO / "README.md").read_text())
    built = subprocess.run(PIP + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src)],
                           check=True, capture_output=True, text=True)
    assert "Warning" not in built.stdout + built.stderr  # e.g. setuptools' license and package-data warnings
    (whl,) = (tmp / "dist").glob("sglang_mm_grpc-*.whl")
    return whl


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(PIP + ["install", "--no-deps", "--no-index", "--target", str(target), str(wheel)], check=True)
    return target


def test_wheel_contents(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for kernel in (REPO / "kernels").glob("*.py"):
        assert f"sglang_mm_grpc/kernels/{kernel.name}" in names
    for preset in (REPO / "sglang_mm_grpc/config/presets").glob("*.json"):
        assert f"sglang_mm_grpc/config/presets/{preset.name}" in names
    package = {p.relative_to(REPO).as_posix() for p in (REPO / "sglang_mm_grpc").rglob("*.py")}
    assert package <= names, f"not in the wheel (pyproject.toml's packages list?): {sorted(package - names)}"
    assert not [n for n in names if n.split("/")[0] in ("kernels", "tests", "sglang", "vllm", "trtllm", "sglang_mm", "proto")]
    assert not [n for n in names if n.endswith(".proto")]


def test_installed_package_preprocesses(site, tmp_path):
    res = subprocess.run([sys.executable, "-c", PREPROCESS, str(site)], capture_output=True, text=True, cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=str(site)))
    assert res.returncode == 0, res.stderr
    assert "(24, 1176) [6]" in res.stdout


def reflect(channel, **query):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    (resp,) = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(**query)]), timeout=10))
    return resp


def test_installed_server_answers_health_and_reflection(site, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(site)], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(site)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), proc.stderr.read() if proc.poll() is not None else line
        with grpc.insecure_channel(f"127.0.0.1:{line.strip()}") as ch:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert r.status == health_pb2.HealthCheckResponse.NOT_SERVING  # nothing loaded yet
            resp = reflect(ch, file_containing_symbol="sglang_mm.v1.MultimodalPreprocessor")
            assert resp.file_descriptor_response.file_descriptor_proto
            # the backends' files, by their upstream names, from the installed smg-grpc-proto
            for dep in ("sglang_scheduler.proto", "vllm_engine.proto", "trtllm_service.proto",
                        "tokenspeed_scheduler.proto", "common.proto"):
                assert reflect(ch, file_by_filename=dep).file_descriptor_response.file_descriptor_proto, dep
    finally:
        proc.kill()
        proc.wait()
