"""The one exception every failure becomes: a gRPC status code plus a message naming the item."""

from __future__ import annotations

import enum


class Code(str, enum.Enum):
    """gRPC status codes of a failure (same names as ``grpc.StatusCode``)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    UNAVAILABLE = "UNAVAILABLE"
    CANCELLED = "CANCELLED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    INTERNAL = "INTERNAL"
    # and the rest, which the client may see (from grpc, a proxy or the gate)
    UNKNOWN = "UNKNOWN"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    DATA_LOSS = "DATA_LOSS"
    UNAUTHENTICATED = "UNAUTHENTICATED"


#: The trailing metadata naming the item a failure belongs to ("image 2", "video 0"), so a
#: client's error carries ``item`` and ``kind`` as the in-process one does.
ITEM_METADATA_KEY = "sglang-mm-item"


class PreprocessError(Exception):
    """A request-rejecting failure. ``code`` maps 1:1 onto a gRPC status.

    ``item`` is the index of the image (or, with ``kind="video"``, the video) the failure
    belongs to (None for request-level failures); it is already part of ``message`` so
    the text alone is useful.
    """

    def __init__(self, code: Code | str, message: str, *, item: int | None = None, kind: str = "image"):
        self.code = Code(code)
        self.item = item
        self.kind = kind  # what ``item`` counts: "image" or "video"
        self.detail = message  # the cause, without the "image N: " prefix
        self.message = f"{kind} {item}: {message}" if item is not None else message
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"PreprocessError({self.code.value}, {self.message!r})"


def invalid(message: str, *, item: int | None = None) -> PreprocessError:
    return PreprocessError(Code.INVALID_ARGUMENT, message, item=item)
