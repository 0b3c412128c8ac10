"""A first start serves each model as soon as its kernels are compiled: SERVING with the
first one ready, the others' health NOT_SERVING and a call for one of them UNAVAILABLE
(saying it loads) until theirs are in the cache too; the next start, the cache marked
warm, loads every model before it says SERVING. A signal during the compile stops it at
once.

The server gets a kernel cache of its own: a copy of the run's, without its warm marks
and without the kernels only Phi-3.5 uses (``bicubic_f32``), so llava's are all there
and Phi-3.5's take seconds to compile.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import grpc
import pytest

import imagegen
from servers import Server, health, wait_until
from sglang_mm_grpc import Code, PreprocessError, Preprocessor, kernels
from sglang_mm_grpc.client import Client

LLAVA = "llava-hf/llava-1.5-7b-hf"
PHI = "microsoft/Phi-3.5-vision-instruct"


@pytest.fixture
def cache_without_phi(tmp_path) -> Path:
    for spec in (LLAVA, PHI):  # the run's cache holds both (compiled here if it did not yet)
        Preprocessor.from_model(spec, cache_bytes=0).warmup()
    root = tmp_path / "numba"
    shutil.copytree(kernels.CACHE_DIR, root / Path(kernels.CACHE_DIR).name,
                    ignore=shutil.ignore_patterns("warm", "locks", "bicubic_f32.*"))
    return root


def test_a_first_start_serves_each_model_once_its_kernels_are_ready(tmp_path, cache_without_phi):
    env = {"NUMBA_CACHE_DIR": str(cache_without_phi)}
    server = Server(tmp_path, models=[LLAVA, PHI], env=env, wait=False)
    try:
        assert wait_until(lambda: status(server.target) == "SERVING", timeout=300), server.log_text()[-3000:]
        with Client(server.target, timeout=60) as c:
            assert health(server.target, 2.0, service=PHI) == "NOT_SERVING"
            with pytest.raises(PreprocessError) as e:
                c.preprocess(PHI, [imagegen.png(40, 60, seed=1)])
            assert e.value.code == Code.UNAVAILABLE and "still loading" in e.value.message, e.value.message
            assert health(server.target, 2.0, service=LLAVA) == "SERVING"
            assert [m.name for m in c.list_models()] == [LLAVA]
            assert c.preprocess(LLAVA, [imagegen.png(40, 60, seed=1)], backend="vllm").payload.vllm.pixel_values
            wait_until(lambda: health(server.target, 2.0, service=PHI) == "SERVING", timeout=300)
            assert c.preprocess(PHI, [imagegen.png(40, 60, seed=1)], backend="vllm").payload.vllm.pixel_values
            assert sorted(m.name for m in c.list_models()) == [LLAVA, PHI]
    finally:
        server.stop()
    log = server.log_text()
    assert f"SERVING on {server.target}: {LLAVA} (1 more loading)" in log, log[-3000:]
    assert f"kernels of {PHI} ready after" in log and f"SERVING {PHI} too (2 of 2 models; 0 loading)" in log
    assert "exited with" not in log

    again = Server(tmp_path, models=[LLAVA, PHI], env=env, name="again")  # warm now
    try:
        assert health(again.target, 2.0, service=PHI) == health(again.target, 2.0, service=LLAVA) == "SERVING"
    finally:
        again.stop()
    assert "compiling kernels" not in again.log_text() and f"{LLAVA}, {PHI}" in again.log_text()


def status(target: str, service: str = "") -> str | None:
    try:
        return health(target, 2.0, service=service)
    except grpc.RpcError:  # not listening yet
        return None


def test_a_health_service_per_model(tmp_path):
    """Each served model is a health service of its own name, as the whole server is ""."""
    server = Server(tmp_path, models=[LLAVA])
    try:
        assert health(server.target, 2.0, service=LLAVA) == "SERVING"
        with pytest.raises(grpc.RpcError) as e:
            health(server.target, 2.0, service="no/such-model")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        server.stop()


def test_a_signal_stops_a_first_start_at_once(tmp_path):
    """SIGTERM while the kernels compile: the helpers are killed and the server exits 0
    within seconds, not once the compile is done."""
    cache = tmp_path / "empty-cache"
    server = Server(tmp_path, models=[LLAVA], env={"NUMBA_CACHE_DIR": str(cache)}, wait=False)
    try:
        assert wait_until(lambda: "compiling kernels: " in server.log_text(), timeout=120), server.log_text()
        assert _processes_using(cache), "no helper compiling"
        server.signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert server.wait(60) == 0, server.log_text()[-3000:]
        assert time.monotonic() - t0 < 15
    finally:
        server.stop()
    assert wait_until(lambda: not _processes_using(cache), timeout=10), "helpers left running"
    assert "kernel compile stopped after" in server.log_text()


def _processes_using(cache: Path) -> list[int]:
    """The processes whose environment names ``cache`` as their NUMBA_CACHE_DIR."""
    mark = f"NUMBA_CACHE_DIR={cache}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            pass
    return found
