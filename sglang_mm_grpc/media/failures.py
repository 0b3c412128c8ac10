"""The fetch layer's failure type: a PreprocessError that also carries a metrics reason.

Helpers deep in the fetch path raise it without knowing the image index; the fetcher
re-raises it once with the index and the redacted source, so every message has the
same shape: ``image 3: https://host/a.png: HTTP 404 Not Found``.
"""

from __future__ import annotations

from ..core.errors import Code, PreprocessError


class FetchFailure(PreprocessError):
    """A fetch failure. ``reason`` (when set) is a refusal counted in the fetcher's stats."""

    def __init__(self, code: Code | str, message: str, *, item: int | None = None, reason: str | None = None,
                 kind: str = "image"):
        super().__init__(code, message, item=item, kind=kind)
        self.cause = message
        self.reason = reason


def refused(reason: str, message: str) -> FetchFailure:
    """A host, path or scheme the policy does not allow."""
    return FetchFailure(Code.PERMISSION_DENIED, message, reason=reason)


def exhausted(limit: str, message: str) -> FetchFailure:
    """A configured limit was hit; ``limit`` is the FetchPolicy field's name."""
    return FetchFailure(Code.RESOURCE_EXHAUSTED, message, reason=limit)


def malformed(message: str) -> FetchFailure:
    return FetchFailure(Code.INVALID_ARGUMENT, message)


def unavailable(message: str) -> FetchFailure:
    return FetchFailure(Code.UNAVAILABLE, message)


def timed_out(message: str) -> FetchFailure:
    return FetchFailure(Code.DEADLINE_EXCEEDED, message)


def human_bytes(n: int) -> str:
    """``64 MiB``, ``1.25 GiB``, ``1000 B``: how limits are named in messages."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{n} B"
