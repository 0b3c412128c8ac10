"""A request's media ids resolved against the media store, and the media it sent remembered.

Each ``MediaItem`` is a URL, inline data or a media id (a blake3 hash, or a client id the
caller bound earlier with ``bind_id``); ids are resolved before anything is fetched, and
every id not held is named in one MissingMedia (NOT_FOUND). After the work, the bytes a
request sent are kept under their hash for that caller and its ``bind_id``s bound to them.

With a shared tier (``media_remote.RemoteMedia``: ``serve --media-store-redis``), the ids
the local store lacks are asked of it before the NOT_FOUND, and what is kept or bound
locally is written to it too, so the other replicas find it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.errors import Code, PreprocessError
from .media_remote import RemoteMedia
from .media_store import MediaStats, MediaStore, MissingMedia, check_client_id, is_hash_id


@dataclass(frozen=True)
class Media:
    """A request's image (or video) sources, after its media ids were resolved."""

    sources: list  # what to fetch: URL / path / base64 strings or bytes (a media id's: the store's)
    hashes: list  # a media id's blake3 (known: not recomputed), else None
    binds: list  # the client id to bind to the image's hash, else None
    scope: str  # the caller identity its media ids, kept images and cache entries belong to


class MediaIds:
    """The media store as requests name its bytes."""

    def __init__(self, store: MediaStore, remote: RemoteMedia | None = None):
        """``remote``: the shared tier, or None (the local store alone)."""
        self.store = store
        self.remote = remote

    async def resolve(self, images, videos, scope: str, audios=(),
                      deadline: float | None = None) -> tuple[Media, Media, Media]:
        """The images', videos' and audio clips' sources for the caller ``scope``; one
        MissingMedia for every id held neither here nor (asked before ``deadline``, an
        absolute time.monotonic()) in the shared tier."""
        parts = [self._sources(items, kind, scope) for items, kind in
                 ((images, "image"), (videos, "video"), (audios, "audio"))]
        if self.remote is not None and any(missing for _, missing in parts):
            parts = await self._read_through(parts, scope, deadline)
        (media, missing), (vmedia, vmissing), (amedia, amissing) = parts
        if missing or vmissing or amissing:
            raise MissingMedia(missing, "" if self.store.enabled else " (it keeps no media: serve "
                               "--media-store-bytes 0)", missing_videos=vmissing, missing_audios=amissing)
        return media, vmedia, amedia

    async def _read_through(self, parts: list, scope: str, deadline: float | None) -> list:
        """The missing ids asked of the shared tier at once; what it has (verified there)
        goes into the sources and into the local store, bound for this caller."""
        assert self.remote is not None
        asked = [(media, i, media_id) for media, missing in parts for i, media_id in missing]
        wanted = []
        for _, _, media_id in asked:
            digest = media_id.lower() if is_hash_id(media_id) else self.store.resolve(scope, media_id)
            wanted.append((digest, None if digest is not None else media_id))
        answers = await self.remote.find(scope, wanted, deadline)
        for (media, i, media_id), answer in zip(asked, answers):
            if answer is not None:
                digest, data = answer
                media.sources[i], media.hashes[i] = data, digest
                self.store.put(digest, data, scope)
                if not is_hash_id(media_id):
                    self.store.bind(scope, media_id, digest)
        return [(media, [(i, m) for i, m in missing if media.hashes[i] is None]) for media, missing in parts]

    def remember(self, media: Media, raw: list, results) -> None:
        """Keep the newly sent images (or videos) for media ids, and bind their ids to them
        (and queue both for the shared tier)."""
        remote = self.remote
        for i, im in enumerate(results):
            if media.hashes[i] is None:
                self.store.put(im.hash, raw[i], media.scope)
                if remote is not None:
                    remote.put(im.hash, raw[i], media.scope)
            if media.binds[i]:
                self.store.bind(media.scope, media.binds[i], im.hash)
                if remote is not None:
                    remote.bind(media.scope, media.binds[i], im.hash)

    def stats(self) -> MediaStats:
        """The local store's counters, and the shared tier's when there is one."""
        stats = self.store.stats()
        return stats if self.remote is None else replace(stats, **self.remote.counts())

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
