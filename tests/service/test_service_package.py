"""A non-editable install ships the generated code, needs no .proto file at run time
(reflection serves the descriptors compiled into it and into smg-grpc-proto) and
installs no top-level ``sglang``, ``vllm`` or ``trtllm`` package that would shadow the
real ones."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from servers import REPO

SCRIPT = r"""
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


def reflect(channel, **query):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    (resp,) = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(**query)]), timeout=10))
    return resp


def test_wheel_install(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    for d in ("sglang_mm_grpc", "kernels"):
        shutil.copytree(REPO / d, src / d, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", src)
    readme = REPO / "README.md"
    (src / "README.md").write_text(readme.read_text() if readme.exists() else "")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                           check=True, capture_output=True, text=True)
    assert "Warning" not in built.stdout + built.stderr  # e.g. setuptools' license and package-data warnings
    (wheel,) = (tmp_path / "dist").glob("*.whl")

    names = zipfile.ZipFile(wheel).namelist()
    committed = sorted(
        p.relative_to(REPO).as_posix() for p in (REPO / "sglang_mm_grpc" / "_proto").rglob("*.py")
    )
    assert set(committed) <= set(names)
    assert not [n for n in names if n.split("/")[0] in ("sglang", "vllm", "trtllm", "sglang_mm", "proto")]
    assert not [n for n in names if n.endswith(".proto")]

    site = tmp_path / "site"
    subprocess.run(pip + ["install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], check=True)
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(site)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
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
