"""Where a handle's Assemble or Release is answered: the process that kept it.

A handle names its owner (``owners.py``): this process answers its own; a sibling process
of the same replica (``serve --processes``) gets the call forwarded; another replica's
handle is FAILED_PRECONDITION, naming the replica to ask.
"""

from __future__ import annotations

from typing import Callable

from ..core import owners
from ..core.errors import Code, PreprocessError


class HandleRouter:
    """Sends a handle's call to the process that owns the handle."""

    def __init__(self, identity: Callable, owner: "owners.Owner | None" = None, forward: Callable | None = None):
        """``identity(context)``: the caller a forwarded call is made for. ``owner``: this
        process's owner id (None: handles name no owner). ``forward(process, method, request,
        context, caller=)``: the sibling's serialized response."""
        self.owner = owner
        self._identity = identity
        self._forward = forward

    async def route(self, handle: str, method: str, request, context):
        """None when this process may own ``handle``; else the owner's answer (a sibling's
        serialized response), or FAILED_PRECONDITION naming another replica."""
        me = self.owner
        owner = owners.owner_of(handle) if me is not None else None
        if me is None or owner is None or owner == me:
            return None
        if owner.replica != me.replica:
            raise PreprocessError(
                Code.FAILED_PRECONDITION,
                f"handle {owners.short(handle)} belongs to replica {owner.replica} (process {owner.process}), "
                f"not to this one ({me.replica}): send {method} to replica {owner.replica}",
            )
        if self._forward is None:
            raise PreprocessError(
                Code.NOT_FOUND,
                f"handle {owners.short(handle)} names process {owner.process} of this replica, which runs one "
                "process: call Preprocess again",
            )
        return await self._forward(owner.process, method, request, context, caller=self._identity(context))
