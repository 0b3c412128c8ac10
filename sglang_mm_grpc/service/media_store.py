"""The media store: encoded images the server has seen recently, by blake3, so a request
can name an image by id instead of sending it again (``MediaItem.media_id``).

Two kinds of id:

* **a hash**: the lowercase hex blake3 of the bytes (64 hex digits; upper case is read
  as lower). A content address: finding bytes for a hash needs their preimage. By
  default a hash names bytes only for the callers that sent them (``scope`` below), so
  whether an id is held tells a caller nothing about another's images; a store made
  ``shared`` (one tenant, many routers: ``serve --shared-media-store``) answers every
  caller.
* **a client id**: any other name (1-128 printable ASCII characters, no spaces), bound to
  a hash by a request that sends the bytes with ``bind_id``. Bindings are kept per
  caller identity (``scope``: the bearer token's hash, the client certificate's, or the
  peer address), so a name means nothing to any other caller: one caller cannot reach
  another's images by guessing or reusing its names. Rebinding a name moves it.

Bytes are kept under a byte budget, least recently used evicted first; a binding whose
bytes were evicted resolves to nothing (the caller sends the bytes again). Bindings are
bounded in number too. Thread-safe (one lock).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..core.errors import Code, PreprocessError

#: A hash id: 64 hex digits (blake3's 256 bits).
HASH_ID = re.compile(r"[0-9a-fA-F]{64}")
#: A client id: 1-128 printable ASCII characters, no spaces.
CLIENT_ID = re.compile(r"[\x21-\x7e]{1,128}")
#: Client ids bound at once, over all callers (the least recently used goes first).
DEFAULT_MAX_BINDINGS = 1 << 16
#: Callers an image is kept for at once (the least recently sending goes first).
MAX_HOLDERS = 256
#: Trailing metadata of a NOT_FOUND for media ids: the missing images' indexes, "0,2".
MISSING_METADATA_KEY = "sglang-mm-missing-media"
#: The same for the missing videos' indexes.
MISSING_VIDEOS_METADATA_KEY = "sglang-mm-missing-videos"
#: The same for the missing audio clips' indexes.
MISSING_AUDIOS_METADATA_KEY = "sglang-mm-missing-audios"


def is_hash_id(media_id: str) -> bool:
    return HASH_ID.fullmatch(media_id) is not None


def check_client_id(name: str, what: str, item: int) -> None:
    """INVALID_ARGUMENT unless ``name`` can be a client id."""
    if CLIENT_ID.fullmatch(name) is None:
        raise PreprocessError(Code.INVALID_ARGUMENT,
                              f"{what} {name[:40]!r}{'...' if len(name) > 40 else ''} is not a valid id: "
                              "1-128 printable ASCII characters without spaces", item=item)
    if is_hash_id(name):
        raise PreprocessError(Code.INVALID_ARGUMENT,
                              f"{what} {name[:16]}... is 64 hex digits, which name bytes by their blake3 hash: "
                              "bind another name (the hash needs no binding)", item=item)


@dataclass(frozen=True)
class MediaStats:
    items: int = 0
    bytes: int = 0
    max_bytes: int = 0
    hits: int = 0
    misses: int = 0
    stored: int = 0
    evictions: int = 0
    bound_ids: int = 0
    peak_bytes: int = 0
    # the shared tier (serve --media-store-redis; media_remote.py): ids found there, not
    # found, lookups failed or skipped, bytes that were not their hash's, writes made, dropped
    remote_hits: int = 0
    remote_misses: int = 0
    remote_errors: int = 0
    remote_invalid: int = 0
    remote_written: int = 0
    remote_dropped: int = 0


class MissingMedia(PreprocessError):
    """NOT_FOUND: media ids this server does not hold. ``missing``: (image index, id);
    ``missing_videos`` / ``missing_audios``: (video or clip index, id); ``trailing`` is the
    metadata that lists the indexes for a client to resend (each modality under its key)."""

    def __init__(self, missing: list[tuple[int, str]], why: str = "",
                 missing_videos: list[tuple[int, str]] | None = None,
                 missing_audios: list[tuple[int, str]] | None = None):
        self.missing = list(missing)
        self.missing_videos = list(missing_videos or ())
        self.missing_audios = list(missing_audios or ())
        kinds = (("image", self.missing), ("video", self.missing_videos), ("audio clip", self.missing_audios))
        shown = ", ".join(f"{kind} {i} (media_id {_short(m)})" for kind, held in kinds for i, m in held)
        what = " and ".join(f"{len(held)} {kind}(s)" for kind, held in kinds if held)
        super().__init__(
            Code.NOT_FOUND,
            f"{what} not held by this server{why}: {shown}; send them again as url or data "
            "(bind_id names them for later calls)",
        )
        trailing = []
        if self.missing:
            trailing.append((MISSING_METADATA_KEY, ",".join(str(i) for i, _ in self.missing)))
        if self.missing_videos:
            trailing.append((MISSING_VIDEOS_METADATA_KEY, ",".join(str(i) for i, _ in self.missing_videos)))
        if self.missing_audios:
            trailing.append((MISSING_AUDIOS_METADATA_KEY, ",".join(str(i) for i, _ in self.missing_audios)))
        self.trailing = tuple(trailing)


def _short(media_id: str) -> str:
    return f"{media_id[:16]}..." if is_hash_id(media_id) else repr(media_id)


class MediaStore:
    def __init__(self, max_bytes: int, *, client_ids: bool = True, max_bindings: int = DEFAULT_MAX_BINDINGS,
                 shared: bool = False):
        """``max_bytes`` 0: nothing is kept (every id misses). ``client_ids`` False: only
        hashes name images (``bind_id`` and client ids are refused by the servicer).
        ``shared``: a hash names its bytes for every caller, not only for those that sent
        them."""
        self.max_bytes = int(max_bytes)
        self.client_ids = client_ids
        self.shared = shared
        self._holders: dict[str, OrderedDict[str, None]] = {}  # hash -> the scopes that sent it
        self.max_bindings = int(max_bindings)
        self._lock = threading.Lock()
        self._items: OrderedDict[str, bytes] = OrderedDict()  # hash -> bytes, oldest use first
        self._bindings: OrderedDict[tuple[str, str], str] = OrderedDict()  # (scope, id) -> hash
        self._bytes = 0
        self._peak = 0
        self._hits = self._misses = self._stored = self._evictions = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def get(self, digest: str, scope: str = "") -> bytes | None:
        """The bytes whose blake3 is ``digest`` (lowercase hex), refreshed; None if not held,
        or held for other callers only (unless the store is shared)."""
        with self._lock:
            data = self._items.get(digest)
            if data is not None and not self.shared and scope not in self._holders.get(digest, ()):
                data = None
            if data is None:
                self._misses += 1
                return None
            self._items.move_to_end(digest)
            self._hits += 1
            return data

    def resolve(self, scope: str, client_id: str) -> str | None:
        """The hash ``scope`` bound ``client_id`` to, or None (never another scope's)."""
        with self._lock:
            digest = self._bindings.get((scope, client_id))
            if digest is not None:
                self._bindings.move_to_end((scope, client_id))
            return digest

    def put(self, digest: str, data: bytes, scope: str = "") -> None:
        """Keep ``data`` under its hash (a bytes object: kept, not copied) for ``scope``."""
        n = len(data)
        if n == 0 or n > self.max_bytes:
            return
        with self._lock:
            holders = self._holders.setdefault(digest, OrderedDict())
            holders[scope] = None
            holders.move_to_end(scope)
            while len(holders) > MAX_HOLDERS:
                holders.popitem(last=False)
            if digest in self._items:
                self._items.move_to_end(digest)
                return
            while self._items and self._bytes + n > self.max_bytes:
                old_digest, old = self._items.popitem(last=False)
                self._holders.pop(old_digest, None)
                self._bytes -= len(old)
                self._evictions += 1
            self._items[digest] = data if isinstance(data, bytes) else bytes(data)
            self._bytes += n
            self._stored += 1
            self._peak = max(self._peak, self._bytes)

    def bind(self, scope: str, client_id: str, digest: str) -> None:
        """``client_id`` names ``digest`` for ``scope`` from now on."""
        with self._lock:
            key = (scope, client_id)
            self._bindings[key] = digest
            self._bindings.move_to_end(key)
            while len(self._bindings) > self.max_bindings:
                self._bindings.popitem(last=False)

    def stats(self) -> MediaStats:
        with self._lock:
            return MediaStats(len(self._items), self._bytes, self.max_bytes, self._hits, self._misses, self._stored,
                              self._evictions, len(self._bindings), self._peak)
