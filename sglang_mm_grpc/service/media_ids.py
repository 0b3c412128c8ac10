"""A request's media ids resolved against the media store, and the media it sent remembered.

Each ``MediaItem`` is a URL, inline data or a media id (a blake3 hash, or a client id the
caller bound earlier with ``bind_id``); ids are resolved before anything is fetched, and
every id not held is named in one MissingMedia (NOT_FOUND). After the work, the bytes a
request sent are kept under their hash for that caller and its ``bind_id``s bound to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import Code, PreprocessError
from .media_store import MediaStore, MissingMedia, check_client_id, is_hash_id


@dataclass(frozen=True)
class Media:
    """A request's image (or video) sources, after its media ids were resolved."""

    sources: list  # what to fetch: URL / path / base64 strings or bytes (a media id's: the store's)
    hashes: list  # a media id's blake3 (known: not recomputed), else None
    binds: list  # the client id to bind to the image's hash, else None
    scope: str  # the caller identity its media ids, kept images and cache entries belong to


class MediaIds:
    """The media store as requests name its bytes."""

    def __init__(self, store: MediaStore):
        self.store = store

    def resolve(self, images, videos, scope: str, audios=()) -> tuple[Media, Media, Media]:
        """The images', videos' and audio clips' sources for the caller ``scope``; one
        MissingMedia for every id not held."""
        media, missing = self._sources(images, "image", scope)
        vmedia, vmissing = self._sources(videos, "video", scope)
        amedia, amissing = self._sources(audios, "audio", scope)
        if missing or vmissing or amissing:
            raise MissingMedia(missing, "" if self.store.enabled else " (it keeps no media: serve "
                               "--media-store-bytes 0)", missing_videos=vmissing, missing_audios=amissing)
        return media, vmedia, amedia

    def remember(self, media: Media, raw: list, results) -> None:
        """Keep the newly sent images (or videos) for media ids, and bind their ids to them."""
        for i, im in enumerate(results):
            if media.hashes[i] is None:
                self.store.put(im.hash, raw[i], media.scope)
            if media.binds[i]:
                self.store.bind(media.scope, media.binds[i], im.hash)

    def cache_scope(self, media: Media) -> str:
        """Whose preprocessing cache entries the request may hit (and so learn of through
        ``cached``): its caller's, unless the media store is shared across callers."""
        return "" if self.store.shared else media.scope

    def _sources(self, items, kind: str, scope: str) -> tuple[Media, list]:
        """Each image's (or video's) source (its URL, data URL, path, base64 text or bytes;
        a media id's bytes from the store, with their hash), the ids to bind, and the
        (index, media id)s not held."""
        store = self.store
        sources: list[str | bytes] = []
        hashes: list[str | None] = []
        binds: list[str | None] = []
        missing: list[tuple[int, str]] = []
        for i, item in enumerate(items):
            which = item.WhichOneof("source")
            if which is None:
                raise PreprocessError(Code.INVALID_ARGUMENT, "empty MediaItem: set url, data or media_id", item=i,
                                      kind=kind)
            if item.bind_id:
                if which == "media_id":
                    raise PreprocessError(Code.INVALID_ARGUMENT, "bind_id binds the bytes sent in url or data; "
                                          f"this {kind} is a media_id", item=i, kind=kind)
                self._check_client_ids("bind_id", i)
                check_client_id(item.bind_id, "bind_id", i)
            binds.append(item.bind_id or None)
            if which != "media_id":
                sources.append(item.url if which == "url" else item.data)
                hashes.append(None)
                continue
            media_id = item.media_id
            if is_hash_id(media_id):
                digest = media_id.lower()
            else:
                self._check_client_ids("a client media_id", i)
                check_client_id(media_id, "media_id", i)
                digest = store.resolve(scope, media_id)
            data = store.get(digest, scope) if digest is not None else None
            if data is None:
                missing.append((i, media_id))
            sources.append(data if data is not None else b"")
            hashes.append(digest if data is not None else None)
        return Media(sources, hashes, binds, scope), missing

    def _check_client_ids(self, what: str, item: int) -> None:
        if not self.store.client_ids:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"{what} is refused: client media ids are off on this "
                                  "server (serve --no-client-media-ids); send the bytes, or their blake3 hash as "
                                  "media_id", item=item)
