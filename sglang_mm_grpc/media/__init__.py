"""Media I/O: fetching sources under a policy (``fetch``) and decoding them (``decode``)."""

from .fetch import FetchPolicy, MediaFetcher

__all__ = ["FetchPolicy", "MediaFetcher"]
