"""Content hash of an encoded image: lowercase hex blake3 of the bytes as received.

The same key vLLM (``mm_hashes``) and the smg gateway use, so router, cache and engine agree.
"""

from __future__ import annotations

import blake3


def content_hash(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()
