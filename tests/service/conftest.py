"""Real processes on 127.0.0.1: the server and the three stub backends (``tests/servers.py``).

Ports are picked free, readiness is awaited through the gRPC health service, and every
process is killed at teardown (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import functools
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servers import Server, start_stubs
from service_support import MAX_RECEIVE, NAMED, NAMED_PRESET, PIXTRAL, QWEN2, QWEN3
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.config import resolve


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
def server_proc(tmp_path_factory, model_dir, media_dir) -> Server:
    """A server with QWEN2, QWEN3, PIXTRAL and NAMED, requests limited to MAX_RECEIVE,
    fetching from loopback and from ``media_dir``."""
    proc = Server(
        tmp_path_factory.mktemp("server"),
        "--max-receive-bytes", str(MAX_RECEIVE),
        "--allow-private-hosts",
        "--allowed-local-media-path", str(media_dir),
        models=[QWEN2, QWEN3, PIXTRAL, f"{NAMED}={model_dir}"],
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def server(server_proc) -> str:
    return server_proc.target


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """backend name -> target of its stub server."""
    procs = start_stubs(tmp_path_factory.mktemp("stubs"))
    try:
        yield {backend: proc.target for backend, proc in procs.items()}
    finally:
        for proc in procs.values():
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
