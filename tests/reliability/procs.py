"""Real processes on 127.0.0.1 for the reliability tests and scripts/soak.py: the server,
the stub backends, and what the operator sees of them (health, RSS, GetStats), from
``tests/servers.py``; and the presets and channel options these tests use.

No pytest here, so the soak script can use it too. Every process is stopped by the
caller (``stop``: SIGTERM, then SIGKILL after a timeout).
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for _p in (str(TESTS), str(TESTS / "service")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from servers import (BACKENDS, Server, free_port, leftover_segments, run_cli, shm_owners, start_stubs,  # noqa: E402, F401
                     wait_serving, wait_until)

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
QWEN3 = "Qwen/Qwen3-VL-8B-Instruct"
PIXTRAL = "mistral-community/pixtral-12b"
LLAVA = "llava-hf/llava-1.5-7b-hf"
MiB = 1 << 20
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 512 * MiB), ("grpc.max_send_message_length", 512 * MiB)]
