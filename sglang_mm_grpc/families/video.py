"""The video side of the family contract: what a family that takes videos provides.

A video family answers, for one video: the video processor a request's options configure
(``video_config``), what the video becomes from its container header alone
(``plan_video``: the sampled frames, the resized size, its rows of pixel_values_videos,
the tokens it expands into), then its pixels (``process_video`` writes its rows from the
decoded frames and returns its rows of the other video tensors) and its rotary position
items (``video_items``). ``pipeline.video_driver`` owns the flow and types against this
class and the two protocols below (what it reads of a video config and of a plan); it
never sees a family's own video types. Another modality (audio) gets its side the same
way: an abstract ``Family`` subclass beside this one, with its own config and plan types.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Generic, Iterable, Protocol, TypeVar

import numpy as np

from ..core.carriers import VideoMeta, VideoOptions
from ..core.layout import Expansion
from ..core.positions import RopeSpan
from .base import Aux, C, Family, G


class VideoProcessor(Protocol):
    """What the video driver reads of a family's video processor (as a request's options
    configured it): the sampling and pixel bounds a video's result echoes. It is a frozen
    dataclass: its repr, every knob, is part of a video's cache key."""

    @property
    def do_sample_frames(self) -> bool: ...
    @property
    def fps(self) -> float | None: ...
    @property
    def num_frames(self) -> int | None: ...
    @property
    def min_frames(self) -> int: ...
    @property
    def max_frames(self) -> int: ...
    @property
    def min_pixels(self) -> int: ...
    @property
    def max_pixels(self) -> int: ...


class VideoPlan(Protocol):
    """What the video driver reads of a video's plan (made from its header alone, kept
    in the preprocessing cache with its rows)."""

    @property
    def meta(self) -> VideoMeta: ...
    @property
    def indices(self) -> tuple[int, ...]: ...  # the sampled frames, ascending
    @property
    def resized_size(self) -> tuple[int, int]: ...  # (height, width) of every frame the model sees
    @property
    def grid(self) -> tuple[int, ...]: ...  # echoed per video
    @property
    def feature_shape(self) -> tuple[int, int]: ...  # its rows of pixel_values_videos
    @property
    def expansion(self) -> Expansion: ...  # the tokens its placeholder becomes
    @property
    def timestamps(self) -> tuple[float, ...]: ...  # per temporal group, where the prompt shows them
    @property
    def second_per_grid(self) -> float | None: ...
    @property
    def token_count(self) -> int: ...


#: A video family's video processor config.
VC = TypeVar("VC", bound=VideoProcessor)
#: A video family's plan of one video.
VP = TypeVar("VP", bound=VideoPlan)


class VideoFamily(Family[C, G], Generic[C, G, VC, VP]):
    """A family that takes videos besides images: ``VC`` its video processor config,
    ``VP`` its plan of one video. It sets ``video_field_layout`` and ``video_token_id``
    (None when the checkpoint has no video processor: ``video_config`` then refuses)."""

    modalities: ClassVar[tuple[str, ...]] = ("image", "video")

    @abstractmethod
    def video_config(self, options: VideoOptions | None = None) -> VC:
        """The video processor as a call with ``options`` configures it (None: the
        model's); INVALID_ARGUMENT naming a field it cannot honour, FAILED_PRECONDITION
        when the checkpoint has no video processor."""

    @abstractmethod
    def plan_video(self, video: VC, meta: VideoMeta, item: int) -> VP:
        """Sampling, size, grid and expansion of a video from its header facts (``item``:
        its index among the request's videos, named by the errors)."""

    @abstractmethod
    def process_video(self, video: VC, frames: Iterable[np.ndarray], plan: VP, out: np.ndarray) -> Aux:
        """Write the video's rows of pixel_values_videos (``out``, every element) from its
        sampled frames (uint8 [H, W, 3], in order); return its rows of the other tensors."""

    @abstractmethod
    def video_items(self, offset: int, plan: VP) -> list[RopeSpan]:
        """The video's M-RoPE items, its expansion placed at ``offset`` in the expanded ids."""
