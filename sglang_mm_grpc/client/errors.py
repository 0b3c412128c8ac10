"""What a failed call raises: the in-process API's ``PreprocessError``, read off the status.

One ``except PreprocessError`` then serves both APIs: ``code`` (a ``Code``), ``message``,
``item`` and ``kind`` (from the status's trailing metadata) mean the same in both. It is a
``grpc.RpcError`` too, so code written against grpc keeps working: ``details()``,
``trailing_metadata()``, and ``code()``, for the one name the two APIs give different
meanings: its ``code`` is a ``CallCode``, equal to the ``Code`` and, called, grpc's
``StatusCode``.
"""

from __future__ import annotations

import functools
from typing import cast

import grpc

from ..core.errors import ITEM_METADATA_KEY, Code, PreprocessError


class CallCode(str):
    """A failure's code as both APIs read it: ``== Code.NOT_FOUND``, ``.value`` and
    ``.name`` as a ``Code``; ``() == grpc.StatusCode.NOT_FOUND`` as a ``grpc.RpcError``'s."""

    @property
    def value(self) -> str:
        return str(self)

    @property
    def name(self) -> str:
        return str(self)

    def __call__(self) -> grpc.StatusCode:
        return grpc.StatusCode[str(self)]

    def __repr__(self) -> str:
        return f"<Code.{self}>"


class RemoteError(PreprocessError, grpc.RpcError):
    """A call the server (or grpc, for one that never reached it) failed; ``error`` is
    grpc's own exception."""

    def __init__(self, error: grpc.RpcError):
        self.error = error
        details = error.details() or ""
        kind, item = _item_of(error)
        prefix = f"{kind} {item}: " if item is not None else ""
        super().__init__(Code(error.code().name), details.removeprefix(prefix), item=item, kind=kind)
        # reads, compares and hashes as the Code does (typed as one for that reason)
        self.code = cast(Code, CallCode(self.code.value))
        self.message = details
        self.args = (details,)

    def details(self) -> str:
        return self.message

    def trailing_metadata(self):
        return self.error.trailing_metadata()

    def initial_metadata(self):
        return self.error.initial_metadata()

    def __repr__(self) -> str:
        return f"RemoteError({self.code}, {self.message!r})"


def raising_remote_errors(method):
    """``method`` with the ``grpc.RpcError`` it raises made a ``RemoteError``."""

    @functools.wraps(method)
    def call(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except grpc.RpcError as e:
            raise RemoteError(e) from None

    return call


def _item_of(error: grpc.RpcError) -> tuple[str, int | None]:
    """("image", 2) from the status's item metadata; ("image", None) without it."""
    try:
        metadata = error.trailing_metadata() or ()
    except Exception:  # an error grpc made locally may have none to give
        metadata = ()
    for key, value in metadata:
        if key == ITEM_METADATA_KEY:
            kind, _, index = (value.decode() if isinstance(value, bytes) else value).partition(" ")
            if index.isdigit():
                return kind, int(index)
    return "image", None
