"""Content hash of an encoded image: lowercase hex blake3 of the bytes as received.

The same key vLLM (``mm_hashes``) and the smg gateway use, so router, cache and engine agree.
"""

from __future__ import annotations

import blake3


def content_hash(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def keyed_hash(key: str) -> str:
    """Lowercase hex blake3 of a text key: the item id of media whose pixels depend on
    more than its bytes (a video's sampling, an image's non-default options)."""
    return blake3.blake3(key.encode("utf-8")).hexdigest()


def hash_of_hashes(*hex_hashes: str) -> bytes:
    """blake3 (32 raw bytes) over the hex hash strings' bytes, in order: the gateway's
    ``hash_hex_strings`` (TokenSpeed's ``MultimodalItem.content_hash`` is it of one hash)."""
    h = blake3.blake3()
    for hex_hash in hex_hashes:
        h.update(hex_hash.encode("ascii"))
    return h.digest()
