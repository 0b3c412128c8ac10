"""Local files, only from under the operator's ``--allowed-local-media-path``.

The path is resolved (symlinks followed) before the containment check, so a symlink
inside the root that points outside it is refused. Only regular files are read: a
device such as ``/dev/zero`` or a FIFO would never end or never start. The file's size
is reserved from the request budget before reading, and a file that grows while being
read is an error rather than a silent truncation.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from .budget import ByteBudget
from .failures import FetchFailure, exhausted, human_bytes, malformed, refused, unavailable
from ..core.errors import Code

_READ_CHUNK = 1 << 20  # read in steps, yielding to the loop between them


def resolve_allowed(path: str, root: str | None) -> str:
    """The real path of ``path`` if it lies under ``root``; PERMISSION_DENIED otherwise."""
    if root is None:
        raise refused("local_path", "local files are not allowed (the server has no --allowed-local-media-path)")
    if "\x00" in path:
        raise malformed("path contains a NUL byte")
    if not os.path.isabs(path):
        raise malformed("local paths must be absolute")
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(root):
        raise refused("local_path", "path is outside the allowed local media path")
    return str(real)


async def read_local_file(path: str, root: str | None, budget: ByteBudget, cap: tuple[str, int] | None = None) -> bytes:
    """``cap``: (its name, bytes) the file may not exceed (a video's limit), checked from its size."""
    real = resolve_allowed(path, root)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        raise FetchFailure(Code.NOT_FOUND, "no such file") from None
    except PermissionError:
        raise refused("local_path", "permission denied") from None
    except OSError as exc:  # ELOOP: the path changed into a symlink after resolving
        raise refused("local_path", f"cannot open: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refused("not_regular_file", "not a regular file")
        size = info.st_size
        if size == 0:
            raise malformed("file is empty")
        if cap is not None and size > cap[1]:
            raise exhausted(cap[0], f"file of {size} bytes exceeds {cap[0]} ({human_bytes(cap[1])})")
        budget.reserve(size)
        chunks, total = [], 0
        while True:
            try:
                chunk = os.read(fd, min(_READ_CHUNK, size + 1 - total))
            except OSError as exc:
                raise unavailable(f"read failed: {exc.strerror}") from None
            if not chunk:
                break
            total += len(chunk)
            if total > size:
                raise unavailable("file grew while being read")
            chunks.append(chunk)
            await asyncio.sleep(0)
        budget.release(size - total)
        if total == 0:
            raise malformed("file is empty")
        return b"".join(chunks)
    finally:
        os.close(fd)
