"""The audio side of the family contract: what a family that takes audio clips provides.

A clip's waveform is decoded and resampled to the family's rate before the family sees
it (``pipeline.audio_driver`` with ``media.audio``), so a family answers only: its feature
extractor as a request's options configure it (``audio_config``), what a clip of so
many samples becomes (``plan_audio``: its feature frames and the tokens its placeholder
expands into; exact, since it needs the sample count alone), and the clip's tensors
(``process_audio``). The driver joins the clips' tensors as the HF processor returns a
batch (``audio_batch``).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

import numpy as np

from ..core.carriers import AudioOptions, DecodedImage, FieldLayout
from ..core.errors import Code, PreprocessError
from ..core.layout import Expansion
from .base import Aux, C, Family, G, ItemPlan
from .hf_keys import ConfigError

#: A family's feature extractor config.
AC = TypeVar("AC")


def kept_samples(options: AudioOptions | None, rate: int) -> int | None:
    """The samples ``options.max_seconds`` keeps of a clip at ``rate`` (the extractor's
    ``truncation=True`` with ``max_length``; at least one), or None for the whole clip."""
    if options is None or options.max_seconds is None:
        return None
    return max(1, int(options.max_seconds * rate))


@dataclass(frozen=True)
class AudioPlan:
    """What one clip becomes, from its sample count at the extractor's rate."""

    samples: int  # after truncation
    frames: int  # feature frames
    expansion: Expansion

    @property
    def token_count(self) -> int:
        return len(self.expansion)


class AudioFamily(Family[C, G], Generic[C, G, AC]):
    """A family that takes audio clips besides images, or alone (``modalities`` without
    "image": the driver refuses images and looks for no image placeholder; its ``plan``
    and ``process_item`` are never reached). It sets ``audio_token_id`` (the clip's
    placeholder) and ``audio_field_layout`` (how its tensors split into clips)."""

    modalities: ClassVar[tuple[str, ...]] = ("image", "audio")
    audio_token_id: int
    audio_field_layout: FieldLayout
    #: The HF name of the clip's main tensor (a backend's encoder input).
    audio_features_key: ClassVar[str]

    @abstractmethod
    def audio_config(self, options: AudioOptions | None = None) -> AC:
        """The feature extractor as a call with ``options`` configures it (None: the
        model's); INVALID_ARGUMENT naming a field it cannot honour."""

    @abstractmethod
    def sampling_rate(self, config: AC) -> int:
        """The rate the extractor takes; clips are resampled to it first."""

    @abstractmethod
    def plan_audio(self, config: AC, samples: int, item: int) -> AudioPlan:
        """Frames and expansion of a clip of ``samples`` samples at the extractor's rate
        (truncated as ``config`` says); INVALID_ARGUMENT naming ``item`` where the
        extractor refuses it."""

    @abstractmethod
    def process_audio(self, config: AC, wave: np.ndarray, plan: AudioPlan) -> dict[str, np.ndarray]:
        """The clip's tensors by HF name, its rows only (``wave``: float32 mono at the
        extractor's rate, ``plan.samples`` long)."""

    @abstractmethod
    def audio_batch(self, clips: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The clips' tensors joined as the HF processor returns them for the request."""


class AudioOnly(AudioFamily[C, None, AC]):
    """A family that takes audio clips alone: images are refused (FAILED_PRECONDITION, before
    anything is fetched: the driver checks ``modalities``), its image token (``image_token_id``,
    never looked for) differs from its audio one, and it has no image tensors."""

    modalities: ClassVar[tuple[str, ...]] = ("audio",)
    processors: ClassVar[tuple[str, ...]] = ("torch",)

    def __init__(self, config: C, image_token_id: int, audio_token_id: int, audio_field_layout: FieldLayout):
        if image_token_id == audio_token_id:
            raise ConfigError("the image token must differ from the audio token")
        self.config = config
        self.image_token_id = image_token_id
        self.audio_token_id = audio_token_id
        self.field_layout = FieldLayout()
        self.audio_field_layout = audio_field_layout

    def plan(self, height: int, width: int, item: int) -> ItemPlan[None]:
        raise PreprocessError(Code.FAILED_PRECONDITION, f"the {self.name} family takes no images", item=item)

    def process_item(self, image: DecodedImage, plan: ItemPlan[None], out: np.ndarray) -> Aux:
        raise PreprocessError(Code.FAILED_PRECONDITION, f"the {self.name} family takes no images")

    def token_ids(self) -> dict[str, int]:
        return {"audio": self.audio_token_id}
