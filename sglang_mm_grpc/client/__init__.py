"""The Python client: one call per RPC against one or several replicas, and the helpers
that build request messages and read payloads back."""

from .client import (
    MISSING_AUDIOS_KEY,
    MISSING_MEDIA_KEY,
    MISSING_VIDEOS_KEY,
    Client,
    audio_item,
    audio_options,
    backend_value,
    image_options,
    media_item,
    missing_audios,
    missing_media,
    missing_videos,
    payload_arrays,
    payload_options,
    video_item,
    video_options,
)
from .endpoints import Endpoints
from .errors import CallCode, RemoteError

__all__ = [
    "MISSING_AUDIOS_KEY", "MISSING_MEDIA_KEY", "MISSING_VIDEOS_KEY", "CallCode", "Client", "Endpoints", "RemoteError",
    "audio_item", "audio_options", "backend_value", "image_options", "media_item", "missing_audios", "missing_media",
    "missing_videos", "payload_arrays", "payload_options", "video_item", "video_options",
]
