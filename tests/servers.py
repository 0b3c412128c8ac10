"""Real processes on 127.0.0.1 for the tests and scripts: free ports, child processes with
their output in a log file, the server (``sglang-mm-grpc serve``) and the stub backends,
and readiness through the gRPC health service.

No pytest here, so scripts can use it too. Every process is stopped by its owner
(``stop``: SIGTERM, then SIGKILL after a timeout).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
BACKENDS = ("sglang", "vllm", "trtllm", "tokenspeed")
#: Options of the channels opened here: calls to 127.0.0.1 never go through a proxy.
LOOPBACK = [("grpc.enable_http_proxy", 0)]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (when asked)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """``sglang-mm-grpc ARGS`` to its end, output captured as text (60 s at most)."""
    return subprocess.run(
        [sys.executable, "-m", "sglang_mm_grpc.cli", *args], capture_output=True, text=True, timeout=60, cwd=REPO
    )


def health(target: str, timeout: float = 2.0, channel: grpc.Channel | None = None, service: str = "") -> str:
    """The health service's status name (``SERVING``, ...) of ``service`` (the whole
    server by default), over ``channel`` if given; RpcError when it does not answer."""
    with contextlib.nullcontext(channel) if channel is not None else grpc.insecure_channel(target, LOOPBACK) as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)


class Proc:
    """A child process with its output in a log file (appended to), started in the repo
    with ``tests/`` on its PYTHONPATH. ``env``: variables set over this environment (a
    value of None removes one)."""

    def __init__(self, argv: list[str], log: Path, env: dict | None = None):
        env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
        self.argv, self.log = argv, log
        self._fh = open(log, "ab")
        self.p = subprocess.Popen(argv, stdout=self._fh, stderr=subprocess.STDOUT, env=env, cwd=REPO)

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def rss_bytes(self) -> int:
        """VmRSS from /proc (0 once the process is gone)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def signal(self, sig: int) -> None:
        if self.alive():
            self.p.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.p.wait(timeout)

    def stop(self, timeout: float = 15.0) -> int:
        if self.alive():
            self.p.terminate()
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self._fh.close()
        return self.p.returncode

    def kill(self) -> None:
        if self.alive():
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()


def served_names(models) -> list[str]:
    """The names a server given these ``--model`` specs serves them as (none: every
    preset); [] when a spec does not load (that server is meant to fail)."""
    from sglang_mm_grpc import config

    try:
        return [config.load(m).name for m in models] if models else config.preset_names()
    except Exception:
        return []


def wait_serving(target: str, proc: Proc, timeout: float = 120.0, models=None) -> float:
    """Seconds until health says SERVING, and with ``models`` (``--model`` specs; () for
    every preset; a ``Server``'s own by default) until each of them does too: a first
    start serves each model once its kernels are compiled. Otherwise the process is
    killed and RuntimeError (with the log's tail) raised."""
    t0 = time.monotonic()
    models = getattr(proc, "models", None) if models is None else models
    services = ["", *served_names(models)] if models is not None else [""]
    with grpc.insecure_channel(target, LOOPBACK) as ch:
        while time.monotonic() - t0 < timeout:
            if not proc.alive():
                raise RuntimeError(f"{target} exited with {proc.p.returncode}:\n{proc.log_text()[-4000:]}")
            try:
                while services and health(target, 1.0, ch, service=services[0]) == "SERVING":
                    services.pop(0)
                if not services:
                    return time.monotonic() - t0
            except grpc.RpcError:
                pass
            time.sleep(0.02)
    proc.kill()  # not left running behind the failed test
    raise RuntimeError(f"{target} not SERVING after {timeout}s:\n{proc.log_text()[-4000:]}")


#: Owner ids of every server started here: their /dev/shm segments must all be gone once
#: the servers are (tests/conftest.py checks at the end of the session).
SHM_OWNERS: set[str] = set()


def shm_owners(args, port: int) -> set[str]:
    """The owner ids a server started with ``args`` names its segments with (with
    ``--processes N`` each process appends ``-p<i>``)."""
    from sglang_mm_grpc.wire.shm import default_owner_id

    args = list(args)
    owner = args[args.index("--shm-owner-id") + 1] if "--shm-owner-id" in args else default_owner_id(port)
    n = int(args[args.index("--processes") + 1]) if "--processes" in args else 0
    return {owner} | {f"{owner}-p{i}" for i in range(n)}


def leftover_segments(owners=None) -> list[str]:
    """Files in /dev/shm named by one of ``owners`` (default: every server started here):
    segments and liveness records."""
    from sglang_mm_grpc.wire.shm import NAME_PREFIX, RECORD_PREFIX

    owners = SHM_OWNERS if owners is None else owners
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return []
    return sorted(n for n in names if n.startswith((NAME_PREFIX, RECORD_PREFIX)) and n.split(".")[1] in owners)


class Server(Proc):
    """``sglang-mm-grpc serve`` on 127.0.0.1 with ``models`` and ``args``; ``target`` is
    HOST:PORT. Returns once SERVING (``ready_s`` seconds), unless ``wait`` is false."""

    def __init__(
        self, workdir: Path, *args: str, models=(), workers: int = 2, port: int | None = None,
        name: str = "server", env: dict | None = None, wait: bool = True,
    ):
        self.port = port or free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.models = list(models)
        SHM_OWNERS.update(shm_owners(args, self.port))
        argv = [sys.executable, "-m", "sglang_mm_grpc.cli", "serve", "--port", str(self.port), "--workers", str(workers)]
        for m in models:
            argv += ["--model", m]
        super().__init__(argv + list(args), Path(workdir) / f"{name}.log", env)
        self.ready_s = wait_serving(self.target, self) if wait else None

    def stats(self, timeout: float = 5.0) -> pb.GetStatsResponse:
        with grpc.insecure_channel(self.target, LOOPBACK) as ch:
            return pb_grpc.MultimodalPreprocessorStub(ch).GetStats(pb.GetStatsRequest(), timeout=timeout)

    def health(self, timeout: float = 2.0) -> str:
        return health(self.target, timeout)


class Stub(Proc):
    """One stub backend (``tests/stub_backends``) on 127.0.0.1; ``target`` is HOST:PORT."""

    def __init__(self, workdir: Path, backend: str, port: int | None = None, *, wait: bool = True):
        self.backend = backend
        self.port = port or free_port()
        self.target = f"127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", f"stub_backends.{backend}_stub", "--port", str(self.port)]
        super().__init__(argv, Path(workdir) / f"stub-{backend}.log")
        if wait:
            wait_serving(self.target, self, timeout=30)

    def restart(self, workdir: Path) -> "Stub":
        self.kill()
        return Stub(workdir, self.backend, self.port)


def start_stubs(workdir: Path) -> dict[str, Stub]:
    """All four, started together; all stopped again if one does not come up."""
    stubs = {b: Stub(workdir, b, wait=False) for b in BACKENDS}
    try:
        for s in stubs.values():
            wait_serving(s.target, s, timeout=30)
    except BaseException:
        for s in stubs.values():
            s.stop()
        raise
    return stubs


def wait_until(pred, timeout: float, interval: float = 0.02):
    """Poll ``pred()`` until truthy; returns its value, or the last one after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() >= end:
            return value
        time.sleep(interval)
