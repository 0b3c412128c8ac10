"""Media I/O: fetching sources under a policy (``fetch``) and decoding them (``decode``)."""

from .fetch import FetchPolicy, MediaFetcher
from .pillow_buffer import enable_in_place_decode

__all__ = ["FetchPolicy", "MediaFetcher", "enable_in_place_decode"]
