"""Processes compiling into one kernel cache at once (a first start's parallel compile,
two servers, a test run's workers): each signature is compiled by one of them and saved
once, the others load it; signatures of one kernel saved at once all stay in its index.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

SCRIPT = """
import sys, time
import numpy as np
from sglang_mm_grpc.kernels import convolve_u8
dtype = sys.argv[1]
while time.time() < float(sys.argv[2]):  # start compiling together
    time.sleep(0.001)
kk = np.zeros((3, 4), dtype)
print("result", convolve_u8.pairable(kk), convolve_u8.pairable(np.ones((2, 2), np.int32)), flush=True)
"""


def _run_together(cache, dtypes):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "NUMBA_DEBUG_CACHE": "1"}
    start = str(time.time() + 3.0)
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, d, start], env=env, stdout=subprocess.PIPE, text=True)
             for d in dtypes]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return outs


def _saves(out: str, name: str) -> int:
    return sum("data saved" in line and name in line for line in out.splitlines())


def test_one_signature_is_compiled_once_and_every_signature_stays(tmp_path):
    # two processes: the same signature (int32) and, at once, the other one of the same
    # kernel (int64) in a third
    outs = _run_together(tmp_path, ["int32", "int32", "int64"])
    assert all("result True True" in out for out in outs), outs
    saved = [_saves(out, "pairable") for out in outs]
    assert sum(saved) == 2, saved  # each signature compiled and saved by one process; the others loaded it
    again = _run_together(tmp_path, ["int32", "int64"])
    assert all(_saves(out, "pairable") == 0 and "data loaded" in out for out in again), again  # both in the index
    assert all("result True True" in out for out in again), again
