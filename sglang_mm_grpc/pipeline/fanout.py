"""The one place that decides how a request's images share the CPU.

The server's single executor runs whole requests; a request with several images offers
its other images to the same executor and runs whatever no idle worker has taken yet
itself. A task already running in the pool therefore never waits on work queued behind
it (no nested pools, no deadlock), an idle server spreads one request over its cores,
and a busy one runs each request on the thread it already has.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor
from typing import Callable, TypeVar

from ..core.errors import Code, PreprocessError
from .metrics import WorkCounters

R = TypeVar("R")


def fan_out(
    fn: Callable[[int], R], count: int, executor: Executor | None,
    cancel: threading.Event | None, work: WorkCounters,
) -> list[R]:
    """``[fn(0), ..., fn(count - 1)]``. Every item is attempted (or skipped once ``cancel``
    is set); errors become PreprocessErrors naming the item, and the lowest failing index
    wins, so the answer does not depend on scheduling."""
    if executor is None or count < 2:
        outcomes = [_outcome(fn, i, cancel, work) for i in range(count)]
    else:
        offered = [executor.submit(_outcome, fn, i, cancel, work) for i in range(1, count)]
        outcomes = [_outcome(fn, 0, cancel, work)]
        for i, future in enumerate(offered, start=1):
            outcomes.append(_outcome(fn, i, cancel, work) if future.cancel() else future.result())
    for ok, value in outcomes:
        if not ok:
            raise value
    return [value for _, value in outcomes]


def _outcome(fn: Callable[[int], R], i: int, cancel: threading.Event | None, work: WorkCounters):
    """(True, fn(i)) or (False, the PreprocessError it ends in)."""
    try:
        return True, _guarded(fn, i, cancel, work)
    except PreprocessError as e:
        return False, e


def _guarded(fn: Callable[[int], R], i: int, cancel: threading.Event | None, work: WorkCounters) -> R:
    if cancel is not None and cancel.is_set():
        work.add(skipped=1)
        raise PreprocessError(Code.CANCELLED, "request cancelled (client gone or deadline passed)", item=i)
    work.add(run=1)
    try:
        return fn(i)
    except PreprocessError:
        raise
    except MemoryError:
        raise PreprocessError(Code.RESOURCE_EXHAUSTED, "out of memory while processing", item=i) from None
    except Exception as e:  # a bug, not the client's fault: say so, keep serving
        raise PreprocessError(Code.INTERNAL, f"internal error: {type(e).__name__}: {e}", item=i) from e
