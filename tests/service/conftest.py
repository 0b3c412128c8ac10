"""Real processes on 127.0.0.1: the server and the three stub backends.

Ports are picked free, readiness is awaited through the gRPC health service, and every
process is killed at teardown (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.config import resolve

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

# The served models: two presets (patch 14 and 16) and one model directory under a NAME.
QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
QWEN3 = "Qwen/Qwen3-VL-8B-Instruct"
PIXTRAL = "mistral-community/pixtral-12b"
NAMED = "qwen25-local"
NAMED_PRESET = "Qwen/Qwen2.5-VL-7B-Instruct"
MAX_RECEIVE = 4 << 20  # small on purpose: the oversized-request test exceeds it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_serving(target: str, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < end:
            if proc.poll() is not None:
                pytest.fail(f"{target} exited with {proc.returncode} before SERVING:\n{log.read_text()[-4000:]}")
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
    pytest.fail(f"{target} not SERVING after {timeout}s:\n{log.read_text()[-4000:]}")


class Proc:
    """A child process with its output in a log file; ``stop`` always leaves it dead."""

    def __init__(self, argv: list[str], log: Path):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
        self.log = log
        self._fh = open(log, "wb")
        self.p = subprocess.Popen(argv, stdout=self._fh, stderr=subprocess.STDOUT, env=env, cwd=REPO)

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self._fh.close()
        return self.p.returncode


def start_server(tmp: Path, *extra: str, models=None, name="server") -> tuple[Proc, str]:
    port = free_port()
    target = f"127.0.0.1:{port}"
    argv = [sys.executable, "-m", "sglang_mm_grpc.cli", "serve", "--port", str(port), "--workers", "2"]
    for m in models or ():
        argv += ["--model", m]
    proc = Proc(argv + list(extra), tmp / f"{name}.log")
    wait_serving(target, proc.p, proc.log)
    return proc, target


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """A checkpoint-like directory (the two JSON files preprocessing reads)."""
    d = tmp_path_factory.mktemp("model")
    src = resolve(NAMED_PRESET)
    (d / "preprocessor_config.json").write_text(json.dumps(src.preprocessor_config))
    (d / "config.json").write_text(json.dumps(src.config))
    return d


@pytest.fixture(scope="session")
def media_dir(tmp_path_factory) -> Path:
    """The server's allowed local media root (tests put files here; also served over http)."""
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="session")
def http_media(media_dir):
    """Base URL of a plain HTTP server on 127.0.0.1 serving ``media_dir``."""
    handler = functools.partial(_QuietHandler, directory=str(media_dir))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server_proc(tmp_path_factory, model_dir, media_dir):
    """(process, target) of a server with QWEN2, QWEN3, PIXTRAL and NAMED, requests
    limited to MAX_RECEIVE, fetching from loopback and from ``media_dir``."""
    tmp = tmp_path_factory.mktemp("server")
    proc, target = start_server(
        tmp,
        "--max-receive-bytes", str(MAX_RECEIVE),
        "--allow-private-hosts",
        "--allowed-local-media-path", str(media_dir),
        models=[QWEN2, QWEN3, PIXTRAL, f"{NAMED}={model_dir}"],
    )
    yield proc, target
    proc.stop()


@pytest.fixture(scope="session")
def server(server_proc) -> str:
    return server_proc[1]


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """backend name -> target of its stub server."""
    tmp = tmp_path_factory.mktemp("stubs")
    procs, targets = [], {}
    try:
        for backend in ("sglang", "vllm", "trtllm"):
            port = free_port()
            argv = [sys.executable, "-m", f"stub_backends.{backend}_stub", "--port", str(port)]
            procs.append(Proc(argv, tmp / f"{backend}.log"))
            targets[backend] = f"127.0.0.1:{port}"
        for proc, target in zip(procs, targets.values()):
            wait_serving(target, proc.p, proc.log, timeout=30)
        yield targets
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture(scope="session")
def pps(model_dir) -> dict[str, Preprocessor]:
    """In-process preprocessors for every served name (the reference for the wire)."""
    out = {
        QWEN2: Preprocessor.from_model(QWEN2),
        QWEN3: Preprocessor.from_model(QWEN3),
        PIXTRAL: Preprocessor.from_model(PIXTRAL),
        NAMED: Preprocessor.from_model(str(model_dir), name=NAMED),
    }
    return out


@pytest.fixture
def client(server):
    from sglang_mm_grpc.client import Client

    with Client(server, timeout=60) as c:
        yield c
