"""The server's memory settings (server/allocator.py), checked in fresh processes: a freed
tensor's memory is reused by the next request's tensor, even from a worker thread."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import resource, sys, threading
import numpy as np
from sglang_mm_grpc.server.allocator import tune_for_large_tensors

tuned = tune_for_large_tensors() if sys.argv[1] == "tune" else None
out = {}

def request():
    np.empty(64 << 18, np.float32).fill(1.0)  # 64 MiB, freed at once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.empty(64 << 18, np.float32).fill(2.0)
    out["faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

t = threading.Thread(target=request)
t.start()
t.join()
from numpy._core import multiarray
print(tuned, out["faults"], multiarray._set_madvise_hugepage(False))
"""


def _probe(mode: str) -> tuple[str, int, str]:
    res = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    tuned, faults, huge = res.stdout.split()
    return tuned, int(faults), huge


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_tuned_process_reuses_freed_tensors_from_worker_threads():
    tuned, faults, huge = _probe("tune")
    assert tuned == "True"
    assert huge == "False"  # numpy no longer asks for huge pages
    assert faults < 1000, f"{faults} page faults for a 64 MiB tensor that should reuse freed memory"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_default_process_faults_the_tensor_in_again():
    """The same probe without the settings: the probe can tell the difference."""
    tuned, faults, _ = _probe("default")
    assert tuned == "None"
    assert faults >= 30  # 64 MiB in 4 KiB pages (16384) or 2 MiB huge pages (32)
