"""Importing the package (the Python API, the client) changes nothing global in the host
process; the server turns on what it needs for itself (Pillow's block allocator, so
decoded pixels are read in place; AMX tiles for the resize kernels, where the CPU has
them)."""

from __future__ import annotations

import json
import subprocess
import sys

from servers import REPO

PROBE = r"""
import ctypes, json, os, sys, threading
import numba, numpy as np
from PIL import Image

def amx_permission():
    # arch_prctl(ARCH_GET_XCOMP_PERM): the extended states this process may use
    mask = ctypes.c_uint64(0)
    ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(mask))
    return mask.value

def state():
    return {
        "pillow_block_allocator": Image.core.get_use_block_allocator(),
        "pillow_max_image_pixels": Image.MAX_IMAGE_PIXELS,
        "numba_cache_dir": numba.config.CACHE_DIR,
        "env": sorted(os.environ.items()),
        "threads": threading.active_count(),
        "numpy_err": np.geterr(),
        "recursion": sys.getrecursionlimit(),
        "amx_permission": amx_permission(),
    }

before = state()
import sglang_mm_grpc
from sglang_mm_grpc import Preprocessor
import sglang_mm_grpc.client
import io
buf = io.BytesIO()
Image.new("RGB", (1200, 900), (10, 200, 30)).save(buf, "JPEG")
out = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct").preprocess([buf.getvalue()])
after = state()
server_side = None
if sys.argv[1:] == ["server"]:
    from sglang_mm_grpc.server import Server, ServerConfig
    Server(ServerConfig(port=0))
    server_side = Image.core.get_use_block_allocator()
from sglang_mm_grpc.kernels import amx
print(json.dumps({"before": before, "after": after, "server": server_side, "amx": amx.granted(),
                  "tokens": int(out.images[0].token_count)}))
"""


def _probe(*args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_importing_and_using_the_package_changes_no_global():
    got = _probe()
    assert got["tokens"] > 0
    assert got["after"] == got["before"]


def test_the_server_reads_decoded_pixels_in_place():
    got = _probe("server")
    assert got["before"]["pillow_block_allocator"] == 0 and got["server"] == 1


def test_the_server_asks_for_amx_tiles_where_the_cpu_has_them():
    """Only the server asks (the probe's library use above left the permission as it was);
    its resize kernels then multiply on tiles. Without AMX on the CPU nothing changes."""
    plain = _probe()
    assert plain["amx"] is False
    got = _probe("server")
    xtiledata = 1 << 18
    if not got["before"]["amx_permission"] & (1 << 17):  # no AMX tile config state on this CPU
        assert got["amx"] is False
        return
    assert not got["before"]["amx_permission"] & xtiledata
    assert got["amx"] is True


def test_the_client_and_the_cli_load_no_kernels():
    """A router importing the client, and the CLI's remote commands, start without numba
    (the package's names load on first use)."""
    code = ("import sys; import sglang_mm_grpc, sglang_mm_grpc.client; from sglang_mm_grpc.cli import commands; "
            "commands.build_parser(); from sglang_mm_grpc import Code, ImageOptions; "
            "print(sorted(m for m in ('numba', 'sglang_mm_grpc.kernels', 'sglang_mm_grpc.pipeline') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr
    code = "import sglang_mm_grpc; print(sglang_mm_grpc.Preprocessor.__module__); sglang_mm_grpc.Nothing"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.stdout.strip() == "sglang_mm_grpc.pipeline.driver" and "has no attribute 'Nothing'" in r.stderr
