"""The Python client: one call per RPC against one or several replicas, and the helpers
that build request messages and read payloads back."""

from .client import (
    MISSING_MEDIA_KEY,
    MISSING_VIDEOS_KEY,
    Client,
    backend_value,
    image_options,
    media_item,
    missing_media,
    missing_videos,
    payload_arrays,
    payload_options,
    video_item,
    video_options,
)
from .endpoints import Endpoints

__all__ = [
    "MISSING_MEDIA_KEY", "MISSING_VIDEOS_KEY", "Client", "Endpoints", "backend_value", "image_options",
    "media_item", "missing_media", "missing_videos", "payload_arrays", "payload_options", "video_item",
    "video_options",
]
