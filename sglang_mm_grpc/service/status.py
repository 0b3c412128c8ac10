"""One RPC's outcome: exactly one gRPC status, counted and logged.

A PreprocessError keeps its code and message (and its trailing metadata), a call
cancelled by grpc (its deadline passed or its client left) is counted as such, anything
unexpected is INTERNAL (and logged with its traceback). The call's admission ticket is
released once its status is decided, or once grpc has sent an OK response.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from ..core.errors import ITEM_METADATA_KEY, Code, PreprocessError
from ..pipeline.metrics import Metrics, RequestRecord, video_refusal_cause
from . import calls
from .admission import Admission, Busy, Ticket

# The servicer's logger: these lines keep the name they have always been logged under.
log = logging.getLogger("sglang_mm_grpc.service.servicer")


class CallRunner:
    """Runs each RPC's work behind the in-flight limit and answers it with one status."""

    def __init__(self, metrics: Metrics, admission: Admission):
        self.metrics = metrics
        self.admission = admission

    async def run(self, context, rec: RequestRecord, fn, *args, admit: bool = False):
        """``fn(*args, rec=rec, ticket=ticket)``: admission (``admit``), status mapping,
        counters and its log line (a cancelled call's names ``fn``)."""
        self.metrics.started_call(rec.method)
        code, message, ticket, finished = "OK", "", None, False
        _follow(context, rec.method)

        def finish() -> None:  # before abort, which sends the status at once
            nonlocal finished
            finished = True
            _release(ticket, context, sent=code == "OK")
            self.metrics.finish(rec, code, message)

        try:
            if admit:
                ticket = self._admit()
            return await fn(*args, rec=rec, ticket=ticket)
        except PreprocessError as e:
            code, message = e.code.value, e.message
            rec.video_refusal = video_refusal_cause(e) if rec.videos else ""
            log.debug("%s: %s", e.code.value, e.message)
            finish()
            await _abort(context, e)
        except asyncio.CancelledError:
            code, message = _cancellation(context)
            log.info("%s: %s", fn.__name__.lstrip("_"), message)
            raise
        except grpc.aio.AbortError:
            code = "UNKNOWN"
            raise
        except Exception as e:  # a bug: report it, keep serving
            code, message = "INTERNAL", f"internal error: {type(e).__name__}: {e}"
            log.exception("internal error")
            finish()
            await context.abort(grpc.StatusCode.INTERNAL, message)
        finally:
            if not finished:
                finish()

    def _admit(self) -> Ticket:
        try:
            return self.admission.enter()
        except Busy as e:
            raise PreprocessError(Code.RESOURCE_EXHAUSTED, str(e)) from None


def refused(error: PreprocessError | None):
    """A call's work that is ``error`` (None: no refusal)."""
    if error is None:
        return None

    async def refuse(*_args, **_kwargs):
        raise error

    return refuse


async def _abort(context, e: PreprocessError) -> None:
    """End the call with ``e``'s status and its trailing metadata."""
    trailing = list(getattr(e, "trailing", None) or ())  # e.g. the images to send again (MissingMedia)
    if e.item is not None:
        trailing.append((ITEM_METADATA_KEY, f"{e.kind} {e.item}"))
    if trailing:
        context.set_trailing_metadata(tuple(context.trailing_metadata() or ()) + tuple(trailing))
    await context.abort(grpc.StatusCode[e.code.value], e.message)


def _follow(context, method: str) -> None:
    """The call's state (``calls.py``), current from here on and still set when grpc sends
    the response; a handle kept for a call grpc reports cancelled after its handler
    returned is dropped then."""
    call = calls.Call(method)
    calls.CURRENT.set(call)
    on_done = getattr(context, "add_done_callback", None)
    if on_done is not None:
        on_done(lambda ctx: call.lose("the call was cancelled") if call.on_lost and _cancelled(ctx) else None)


def _release(ticket: Ticket | None, context, *, sent: bool) -> None:
    """Free the call's admission slot: an OK response (possibly a large payload) still has
    to be sent, so its slot is held until grpc has finished the call."""
    if ticket is None:
        return
    on_done = getattr(context, "add_done_callback", None)
    if sent and on_done is not None:
        on_done(lambda _ctx: ticket.release())
    else:
        ticket.release()


def _cancellation(context) -> tuple[str, str]:
    """(code, message) of a handler grpc cancelled: its deadline passed, or its client
    went away (pool work stops at its next image boundary, see ``pool.py``)."""
    remaining = context.time_remaining()
    deadline = remaining is not None and remaining < 0.01
    return ("DEADLINE_EXCEEDED", "deadline exceeded") if deadline else ("CANCELLED", "cancelled by the client")


def _cancelled(context) -> bool:
    try:
        return bool(context.cancelled())
    except Exception:
        return False
