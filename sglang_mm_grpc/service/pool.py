"""The hand-off of CPU work to the executor, never run on the event loop.

A call's deadline and its cancellation reach the worker as a ``threading.Event`` it
checks at each image boundary; the call's admission ticket stays held until the worker
is done, even after the call itself is gone, and the pool counts its tasks (``busy``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from concurrent.futures import Executor

import grpc

from ..core.errors import Code, PreprocessError
from .admission import Ticket


class Deadline:
    """The request's deadline as seen from the server (None: the client set none)."""

    def __init__(self, context: grpc.aio.ServicerContext):
        remaining = context.time_remaining()
        self.at = None if remaining is None else time.monotonic() + remaining

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def check(self, before: str) -> None:
        if self.passed():
            raise PreprocessError(Code.DEADLINE_EXCEEDED, f"deadline exceeded before {before}")


class WorkPool:
    """The executor, its running task count and the cancel events of the calls in it."""

    def __init__(self, executor: Executor):
        self.executor = executor
        self._busy_lock = threading.Lock()
        self._busy = 0  # pool tasks submitted and not finished (cancelled calls included)
        self._cancels: set[threading.Event] = set()  # one per preprocessing call in the pool

    @property
    def busy(self) -> int:
        """Pool tasks submitted and not finished (a cancelled call's included)."""
        return self._busy

    async def cancellable(self, ticket: Ticket | None, deadline: Deadline, fn, *args, abandoned=None):
        """Run ``fn(*args, cancel=event)`` in the pool; the event is set when the deadline
        passes or the call is cancelled, so the worker stops at its next image boundary
        instead of finishing work nobody will read. ``abandoned(result)`` is called with
        what the worker still returns after the call was cancelled."""
        cancel, expired = threading.Event(), threading.Event()
        self._cancels.add(cancel)
        loop = asyncio.get_running_loop()

        def expire() -> None:
            expired.set()
            cancel.set()

        timer = None
        if deadline.at is not None:
            timer = loop.call_later(max(0.0, deadline.at - time.monotonic()), expire)
        try:
            return await self.run(functools.partial(fn, *args, cancel=cancel), ticket=ticket, abandoned=abandoned)
        except PreprocessError as e:
            if e.code is Code.CANCELLED and expired.is_set():  # stopped by our deadline timer
                raise PreprocessError(Code.DEADLINE_EXCEEDED, "deadline exceeded while preprocessing") from None
            raise
        except asyncio.CancelledError:
            cancel.set()
            raise
        finally:
            self._cancels.discard(cancel)
            if timer is not None:
                timer.cancel()

    def cancel_all(self) -> None:
        """Stop every preprocessing call at its next image (shutdown, past the grace period)."""
        for cancel in list(self._cancels):
            cancel.set()

    async def run(self, fn, *args, ticket: Ticket | None = None, abandoned=None):
        """``fn(*args)`` in the pool. The call's admission ticket stays held until the
        worker is done, even if the call itself is cancelled first; then ``abandoned``
        gets the worker's result, if it has one."""
        if ticket is not None:
            ticket.hold()
        with self._busy_lock:
            self._busy += 1
        try:
            future = self.executor.submit(fn, *args)
        except BaseException:
            self._done(ticket)
            raise
        future.add_done_callback(lambda _f: self._done(ticket))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if abandoned is not None:
                future.add_done_callback(
                    lambda f: abandoned(f.result()) if not f.cancelled() and f.exception() is None else None)
            raise

    async def timed(self, fn, *args, ticket: Ticket | None = None):
        """``run(fn, *args)`` -> ``(its result, ms its work took)``, timed in the worker (so
        waiting for one is not counted)."""
        return await self.run(_timed, fn, *args, ticket=ticket)

    def _done(self, ticket: Ticket | None) -> None:
        with self._busy_lock:
            self._busy -= 1
        if ticket is not None:
            ticket.release()


def _timed(fn, *args):
    """``(fn(*args), ms)``, timed inside the worker."""
    t = time.perf_counter()
    result = fn(*args)
    return result, (time.perf_counter() - t) * 1e3
