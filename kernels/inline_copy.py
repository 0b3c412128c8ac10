"""A faster copy of an inlined callee's IR in numba's inliner (``inline="always"``).

numba's ``InlineWorker.inline_ir`` copies the callee's IR block by block, each block with
a ``deepcopy`` of its own. Every variable points at the function's one ``Scope``, which
holds every variable, so each block's copy copies the whole scope again: the cost grows
with blocks times variables, and a kernel that inlines large helpers (the resampling
passes) spent half its compile time there. Here the blocks of one IR are copied with one
memo, as one ``deepcopy`` of the whole IR would: one copied scope, shared by the copied
blocks, as the original blocks share theirs. Compile time only: the machine code is the same (compared for
``horizontal_pass_two`` when this was written: 134 s to compile before, 75 s after);
tests/kernels/test_numba_private_api.py checks the inliner still has this shape.
"""

from __future__ import annotations

import copy
import threading

from numba.core import inline_closurecall, ir


class _BlockCopier(threading.local):
    """Stands in for the ``copy`` module inside ``inline_closurecall`` (whose one use of it
    is ``copy.deepcopy(block)`` in ``inline_ir``): while an ``inline_ir`` runs, blocks
    with the same scope are copied with the same memo."""

    memos: dict | None = None

    def deepcopy(self, x, memo=None):
        if memo is None and self.memos is not None and isinstance(x, ir.Block):
            memo = self.memos.setdefault(id(x.scope), {})
        return copy.deepcopy(x, memo)

    def __getattr__(self, name):
        return getattr(copy, name)


_copier = _BlockCopier()
_inline_ir = inline_closurecall.InlineWorker.inline_ir


def _inline_ir_sharing_memos(self, *args, **kwargs):
    saved, _copier.memos = _copier.memos, {}
    try:
        return _inline_ir(self, *args, **kwargs)
    finally:
        _copier.memos = saved


def install() -> None:
    """Once per process, before any kernel compiles."""
    if inline_closurecall.copy is not _copier:
        inline_closurecall.InlineWorker.inline_ir = _inline_ir_sharing_memos
        inline_closurecall.copy = _copier
