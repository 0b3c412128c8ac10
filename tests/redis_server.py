"""A redis-server of a test's own: Debian's binary on a free loopback port, persistence
off, stopped by its owner. Without the binary its tests are skipped, unless
``SGLANG_MM_REQUIRE_REDIS`` is set (CI installs it and requires it): then they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from servers import free_port, wait_until

redis = pytest.importorskip("redis")


def redis_server_binary() -> str:
    """redis-server, or a skip where it is missing (a failure where it is required)."""
    path = shutil.which("redis-server")
    if path is None:
        if os.environ.get("SGLANG_MM_REQUIRE_REDIS"):
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return path


class Redis:
    """A redis-server of its own: loopback, a free port, no persistence."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        assert wait_until(lambda: pings(client), 10), "redis-server did not start"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def pings(client) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
