"""A Preprocess or Plan request checked, its media resolved and fetched: the ``Request``
its work runs on.

Everything that can be refused from the request alone is, before any fetch: its shape,
its options, raw pixels, its media ids, a video for a model that takes none. Its bytes
then come fetched, decoded from data URLs, or from the media store. The Request also
carries the bound on what its plans may make (``size_check``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol, Sequence

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.carriers import ImageOptions
from ..core.errors import Code, PreprocessError
from ..media.sources import describe as describe_source
from ..pipeline.driver import Preprocessor
from ..pipeline.metrics import RequestRecord
from ..wire import assemble as asm
from ..wire import serialize as wire
from . import messages
from .handles import HandleStore
from .media_ids import Media, MediaIds
from .models import ServedModels
from .transport import Resolved, Transport
from .pool import Deadline

class Fetch(Protocol):
    """Sources (URL / data URL / path / base64 strings, or bytes), an absolute
    time.monotonic() deadline and what each source is (``items``; default: images) ->
    encoded bytes in order, or PreprocessError. The server passes
    media.MediaFetcher.fetch_all."""

    def __call__(self, sources: Sequence[str | bytes], deadline: float | None,
                 items: Sequence[Any] | None = None) -> Awaitable[list[bytes]]: ...


@dataclass(frozen=True)
class Clips:
    """A request's videos or audio clips after their fetch."""

    kind: str  # "video" or "audio": the prefix of their keyword arguments
    raw: list  # encoded bytes, in order
    media: Media
    options: object  # the request's video_options / audio_options (VideoOptions / AudioOptions), or None
    per_item: list | None  # each MediaItem's own options (None where unset), or None

    def arguments(self) -> dict:
        """Their keyword arguments of ``Preprocessor.preprocess`` / ``plan`` (none without any)."""
        if not self.raw:
            return {}
        k = self.kind
        return {f"{k}s": self.raw, f"{k}_options": self.options, f"per_{k}_options": self.per_item,
                f"{k}_hashes": self.media.hashes}


NO_AUDIOS = Clips("audio", [], Media([], [], [], ""), None, None)


@dataclass(frozen=True)
class Request:
    """A Preprocess or Plan call after its checks and its fetch."""

    model: Preprocessor
    raw: list  # encoded bytes, in order
    input_ids: list[int] | None
    options: ImageOptions | None  # the request's image_options
    image_options: list | None  # each MediaItem's options (None where unset), or None
    media: Media
    max_image_tokens: int | None  # the request's budget per image (None: the model's)
    videos: Clips
    resolved: Resolved  # its payload options: raw pixels, the worker's limits
    check_size: Callable  # what its plans may make (``size_check``)
    deadline: float | None = None  # time.monotonic() the call must end by (None: no deadline)
    audios: Clips = NO_AUDIOS


class Intake:
    """Turns a PreprocessRequest into a ``Request``: every check first, then the fetch."""

    def __init__(self, fetch: Fetch, identity: Callable, models: ServedModels, media_ids: MediaIds,
                 transport: Transport, store: HandleStore):
        """``identity(context)``: the caller whose media ids a request names. ``transport`` and
        ``store``: their limits bound what a request may make."""
        self.fetch = fetch
        self.identity = identity
        self.models = models
        self.media_ids = media_ids
        self.transport = transport
        self.store = store

    async def fetched(self, request: pb.PreprocessRequest, context, rec: RequestRecord, deadline: Deadline,
                      pp: Preprocessor, resolved: Resolved) -> Request:
        """The request checked (shape, options, raw pixels, media ids) before anything is
        fetched, then its images', videos' and audio clips' bytes."""
        rec.images = len(request.images)
        input_ids = list(request.input_ids) if request.input_ids else None
        videos, audios = len(request.videos), len(request.audios)
        if videos:
            self.models.check_takes_video(pp, request.model, videos)
        pp.check_request(len(request.images), input_ids, videos=videos, audios=audios)  # before any fetch
        options, image_options = messages.image_options(request)
        pp.configure(len(request.images), options, image_options, request.max_image_tokens or None, resolved.raw)
        video_options, per_video = messages.video_options(request)
        audio_options, per_audio = messages.audio_options(request)
        # hashes and client ids name this caller's images
        media, vmedia, amedia = await self.media_ids.resolve(request.images, request.videos,
                                                             self.identity(context), request.audios, deadline.at)
        deadline.check("fetching")
        tf = time.perf_counter()
        raw = await self.fetch([*media.sources, *vmedia.sources, *amedia.sources], deadline.at,
                               items=_items(pp, len(media.sources), videos, audios))
        rec.stages_ms["fetch"] = (time.perf_counter() - tf) * 1e3
        n, m = len(media.sources), len(media.sources) + videos
        rec.bytes = sum(len(b) for b in raw[:n])
        rec.video_bytes = sum(len(b) for b in raw[n:m])
        check = size_check(request, pp, resolved, self.transport.max_send_bytes, self.store.max_bytes)
        return Request(pp, raw[:n], input_ids, options, image_options, media, request.max_image_tokens or None,
                       Clips("video", raw[n:m], vmedia, video_options, per_video), resolved, check, deadline.at,
                       Clips("audio", raw[m:], amedia, audio_options, per_audio) if audios else NO_AUDIOS)


def _items(pp: Preprocessor, images: int, videos: int, audios: int) -> list[tuple]:
    """What each fetched source is: images under the image rules, videos and clips under
    their own byte limits."""
    vcap = ("video_max_bytes", pp.video_limits.max_bytes)
    items = [("image", i, None) for i in range(images)] + [("video", i, vcap) for i in range(videos)]
    if audios:
        acap = ("audio_max_bytes", pp.audio_limits.max_bytes)
        items += [("audio", i, acap) for i in range(audios)]
    return items


def size_check(request: pb.PreprocessRequest, pp: Preprocessor, resolved: Resolved, max_send: int | None,
               max_keep: int) -> Callable:
    """The bound on what a Preprocess (or the Plan of one) makes, from its plans, before
    any pixel work: its response within the send limit (ids twice with a payload, the
    M-RoPE positions, pixels in the wire dtype when they travel inline) and its kept
    result within the handle store."""
    backend = asm.parse_backend(request.backend) if request.backend else None
    keep = backend is None or request.keep_handle
    inline = backend is not None and not resolved.wire.shm
    width = wire.WIDTHS.get(asm.check_options(backend, resolved.wire), 0) if inline else 0
    itemsize = (pp.family.raw() if resolved.raw else pp.family).pixel_dtype.itemsize
    mrope = pp.family.uses_mrope

    def check(expanded: int, elements: int) -> None:
        positions = 3 * 8 * expanded if mrope else 0
        sent = 5 * expanded * (2 if backend is not None else 1) + positions + elements * width
        if max_send and sent > max_send:
            raise PreprocessError(Code.RESOURCE_EXHAUSTED, wire.too_large(sent, max_send) + "; not decoded")
        kept = elements * itemsize + 2 * 8 * expanded + positions
        if keep and kept > max_keep:
            raise PreprocessError(
                Code.RESOURCE_EXHAUSTED,
                f"the result would take {kept} bytes, over the handle store's {max_keep} (serve --store-bytes); "
                "not decoded: set backend in PreprocessRequest to get the payload in one call")

    return check


def naming_source(e: PreprocessError, req: Request) -> PreprocessError:
    """A decode or pixel error about a fetched image (or video) also names where it came
    from (redacted), as fetch errors do; inline bytes need no naming beyond the index."""
    kind = getattr(e, "kind", "image")
    sources = {"video": req.videos.media.sources, "audio": req.audios.media.sources}.get(kind, req.media.sources)
    if e.item is None or e.item >= len(sources) or isinstance(sources[e.item], (bytes, bytearray)):
        return e
    return PreprocessError(e.code, f"{describe_source(sources[e.item])}: {e.detail}", item=e.item, kind=kind)
