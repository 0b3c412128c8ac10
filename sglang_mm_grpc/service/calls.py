"""What the server learns about a call after its handler returned.

grpc runs a handler and then, in the same asyncio task, sends its response. When the
client gave up in that instant, the send fails and grpcio logs an ERROR with a traceback
(``ExecuteBatchError raised in core by servicer method [...]``); the handler never hears
of it, and a handle it kept would live until its TTL. ``Call`` is the call's own state,
held in a context variable that the handler sets and that is still set in that task when
grpcio logs; ``install_log_filter`` turns that record into one INFO line and runs the
call's ``on_lost`` (dropping the handle nobody received). The servicer also runs
``on_lost`` from the call's done callback when grpc reports the call cancelled.
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger("sglang_mm_grpc.requests")

GRPC_LOGGER = "grpc._cython.cygrpc"


@dataclass
class Call:
    method: str
    handle: str = ""  # what the response carries, for the log line
    on_lost: list[Callable[[], None]] = field(default_factory=list)
    lost: bool = False

    def lose(self, why: str) -> None:
        """The response did not reach the client: run ``on_lost`` once, log one line."""
        if self.lost:
            return
        self.lost = True
        for fn in self.on_lost:
            try:
                fn()
            except Exception:  # a cleanup that fails must not take the log record with it
                logging.getLogger(__name__).exception("cleanup of a lost %s call failed", self.method)
        dropped = f"; handle {self.handle[:8]} dropped" if self.handle and self.on_lost else ""
        log.info("%s: %s before its response was sent%s", self.method, why, dropped)


CURRENT: contextvars.ContextVar[Call | None] = contextvars.ContextVar("sglang_mm_call", default=None)


class _LostResponses(logging.Filter):
    """Drops grpcio's ExecuteBatchError tracebacks for calls whose client already left."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or type(exc).__name__ != "ExecuteBatchError":
            return True
        call = CURRENT.get()
        if call is None:
            log.info("a call ended by its client before its response was sent")
        else:
            call.lose("the client cancelled or its deadline passed")
        return False


_FILTER = _LostResponses()


def install_log_filter() -> None:
    """Once per process (idempotent)."""
    logger = logging.getLogger(GRPC_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
