"""Start the server as configured: one process, or the supervisor of ``serve --processes N``."""

from __future__ import annotations

import asyncio

from .allocator import tune_for_large_tensors
from .app import ServerConfig, serve
from .supervisor import supervise


def run(config: ServerConfig) -> int:
    """Serve until stopped; returns the process exit code."""
    if config.processes > 1 and config.sibling_dir is None:  # the supervisor of serve --processes N
        return supervise(config)
    if config.tune_malloc:  # before any worker thread exists
        tune_for_large_tensors()
    return asyncio.run(serve(config))
