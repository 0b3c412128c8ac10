"""Who owns a handle: the replica, and the process inside it, that kept the result.

A handle is ``<32 hex digits>@<replica>/<process>``, e.g.
``9f3c...e1@mm-7d9f6-x2kq/1``. The replica id is ``serve --replica-id`` (default: the
host name and the port, which differ between the pods of a Deployment and between
servers on one host); the process is the index of the ``serve --processes`` process
that kept it. ``Assemble`` and ``Release`` reaching another process of the same replica
are forwarded to the owner; reaching another replica they answer FAILED_PRECONDITION
naming the owner, and ``sglang_mm_grpc.client.Client`` sends them to it directly.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

SEP = "@"
#: Trailing metadata key on every response: the owner id of the process that answered.
METADATA_KEY = "sglang-mm-owner"
_REPLICA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$")


@dataclass(frozen=True)
class Owner:
    replica: str
    process: int = 0

    def __str__(self) -> str:
        return f"{self.replica}/{self.process}"


def check_replica_id(text: str) -> str:
    """``text`` if it can name a replica inside a handle (letters, digits, ``.``, ``_``,
    ``:``, ``-``; at most 63), else ValueError."""
    if not _REPLICA.match(text or ""):
        raise ValueError(
            f"replica id {text!r} must be 1-63 characters of letters, digits, '.', '_', ':' or '-', "
            "starting with a letter or digit"
        )
    return text


def default_replica_id(port: int) -> str:
    """The host name (a pod's name on Kubernetes) and the port, made fit for a handle."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).strip(".-_") or "host"
    return f"{host[: 62 - len(str(port))]}-{port}"


def parse(text: str) -> Owner | None:
    """``"replica/3"`` -> Owner; None when it is not an owner id."""
    replica, slash, process = text.rpartition("/")
    if not slash or not process.isdigit() or not _REPLICA.match(replica):
        return None
    return Owner(replica, int(process))


def owner_of(handle: str) -> Owner | None:
    """The owner a handle names; None for a handle without one (or not a handle)."""
    _, at, owner = handle.rpartition(SEP)
    return parse(owner) if at else None


def short(handle: str) -> str:
    """What messages show of a handle: its first 8 characters and its owner (at most 80
    characters of it: a handle is the caller's text, of any length)."""
    token, at, owner = handle.rpartition(SEP)
    if len(owner) > 80:
        owner = owner[:80] + "…"
    return f"{token[:8]}…{SEP}{owner}" if at else f"{handle[:8]}…"
