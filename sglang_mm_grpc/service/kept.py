"""Results kept under handles for Assemble, each usable by the caller that made it only.

A kept result owns shared-memory segments (its staged pixel tensors, and those its
payloads handed out); whoever takes it out of the handle store removes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import owners
from ..core.carriers import ImageOptions, PreprocessOutput
from ..core.errors import Code, PreprocessError
from ..wire import assemble as asm
from .handles import HandleStore, TooLarge
from .transport import Transport


@dataclass
class Kept:
    """One kept intermediate: what Assemble needs to build any backend's payload."""

    model: str
    output: PreprocessOutput
    field_layout: object  # families.FieldLayout (batched, flat)
    # tensor name -> the shm.Segment holding it (pixel_values, pixel_values_videos: Preprocess asked for SHM)
    staged: dict = field(default_factory=dict)
    segments: list = field(default_factory=list)  # shm.Segments its payloads handed out
    video_field_layout: object = None  # the family's layout of the video tensors (with videos)
    audio_field_layout: object = None  # the family's layout of the audio tensors (with audio clips)
    image_defaults: ImageOptions | None = None  # an image's effective options when it asks none
    caller: str = ""  # who made it (``callers.identity``): nobody else may use its handle

    def all_segments(self) -> list:
        return [*self.staged.values(), *self.segments]

    def copied(self, segments) -> None:
        """Own the segments a payload handed out: those written for it (its staged ones it
        owns already)."""
        staged = list(self.staged.values())  # Segments compare by identity
        self.segments.extend(s for s in segments if s not in staged)


class KeptResults:
    """The handle store's results, with their segments removed as they leave it."""

    def __init__(self, store: HandleStore[Kept], transport: Transport):
        self.store = store
        self.transport = transport

    def keep(self, kept: Kept) -> str:
        """``kept``'s new handle; RESOURCE_EXHAUSTED when it is bigger than the store."""
        try:
            return self.store.put(kept, asm.output_nbytes(kept.output))
        except TooLarge as e:
            raise PreprocessError(
                Code.RESOURCE_EXHAUSTED,
                f"{e}; cannot keep this request: set backend in PreprocessRequest to get the payload in one call",
            ) from None

    def drop(self, handle: str) -> None:
        """Forget a result kept for a call that will not return it (and its segments)."""
        if handle:
            kept = self.store.pop(handle)
            if kept is not None:
                self.transport.drop(kept.all_segments(), "failed", unread_too=True)

    def mine(self, handle: str, caller: str) -> Kept | None:
        """The result kept under ``handle`` if ``caller`` made it (a handle names nothing
        to anyone else)."""
        kept = self.store.get(handle)
        return kept if kept is not None and kept.caller == caller else None

    def owned(self, handle: str, caller: str) -> Kept:
        """What Assemble builds from: ``mine``, or NOT_FOUND alike when it is gone, was never
        issued or is another's (INVALID_ARGUMENT when no handle is named)."""
        if not handle:
            raise PreprocessError(
                Code.INVALID_ARGUMENT,
                "handle is empty: Preprocess returns a handle when no backend is set, or with keep_handle "
                "when one is (a one-shot call's payload is already in its response)",
            )
        kept = self.mine(handle, caller)
        if kept is not None:
            return kept
        why = self.store.why_missing(handle) if self.store.get(handle) is None else "unknown"
        raise PreprocessError(
            Code.NOT_FOUND,
            f"handle {owners.short(handle)} is {why}{' (or was never issued)' if why == 'unknown' else ''}: "
            "call Preprocess again",
        )

    def assembled(self, handle: str) -> None:
        """An Assemble with ``release`` is done with the result: its unused staged segments
        go; what its payload handed out lives until read or its lease ends."""
        gone = self.store.pop(handle)
        if gone is not None:
            self.transport.drop(gone.all_segments(), "release")

    def release(self, handle: str, caller: str) -> bool:
        """Release ``caller``'s result (False: none such): its segments go, read or not
        (readers first, else here)."""
        kept = self.store.pop(handle) if self.mine(handle, caller) is not None else None
        if kept is not None:
            self.transport.drop(kept.all_segments(), "release", unread_too=True)
        return kept is not None
