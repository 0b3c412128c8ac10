"""Who a call comes from, for what the server keeps per caller: handles, media ids, the
hashes a caller may look up and the preprocessing cache entries it may hit.

The identity is the gate's (``gate.caller_identity``: the bearer token's hash, else the
client certificate's, else the connection). A call that a sibling process of ``serve
--processes`` forwards arrives over the sibling's Unix socket with the original caller's
identity in ``sglang-mm-caller``; that header is believed only there, never from a
network peer.
"""

from __future__ import annotations

from typing import Callable

#: Metadata of a call forwarded between the processes of one replica.
FORWARDED = "sglang-mm-forwarded-from"
CALLER = "sglang-mm-caller"


def identity(context, base: Callable) -> str:
    """The caller of ``context``: the forwarded identity on a sibling's call, else ``base(context)``."""
    if context is None:
        return ""
    peer = context.peer() or ""
    if peer.startswith("unix:"):
        md = {k: v for k, v in context.invocation_metadata() or ()}
        forwarded = md.get(CALLER)
        if FORWARDED in md and forwarded:
            return forwarded.decode("latin-1") if isinstance(forwarded, bytes) else forwarded
    return base(context)
