"""What every family provides. Families describe data; the driver owns the flow.

A family turns one decoded image into its tensors (``process_item``), says what tokens
the image becomes (``expansion``), and optionally computes rotary positions. It never
fetches, never touches gRPC and never sees other requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..carriers import DecodedImage, ProcessedItem
from ..layout import AppliedLayout, Expansion

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class FieldLayout:
    """How vLLM splits each tensor into items: batched on dim 0, or flat by a sizes tensor.

    Tensors in neither are shared across items.
    """

    batched: tuple[str, ...] = ()
    flat: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ItemPlan:
    """What an image will become, known from its size alone (before any pixel work)."""

    resized_size: tuple[int, int]  # (height, width)
    feature_shape: tuple[int, ...]  # this item's block of pixel_values
    geometry: tuple[int, ...]


class Family:
    """Base class: subclasses set the class attributes and implement the methods."""

    name: str = ""
    reference_processor: str = ""
    modalities: tuple[str, ...] = ("image",)
    uses_mrope: bool = False

    #: True when pixel_values can have padding between items' slots (the batch is then
    #: zero-filled; a lone image's batch is all slot and is not).
    pads_batch: bool = False

    image_token_id: int
    field_layout: FieldLayout

    def plan(self, height: int, width: int, item: int) -> ItemPlan:
        raise NotImplementedError

    def process_item(self, image: DecodedImage, plan: ItemPlan, out: np.ndarray) -> ProcessedItem:
        """Write the item's features into ``out`` (its slot of pixel_values), every element
        of it: the slot is not zeroed beforehand."""
        raise NotImplementedError

    def batch_shape(self, plans: list[ItemPlan]) -> tuple[tuple[int, ...], list[tuple]]:
        """pixel_values' shape and each item's slot in it (an index tuple whose view has
        the item's ``feature_shape``). Default: concatenate on dim 0."""
        rows = [p.feature_shape[0] for p in plans]
        starts = np.concatenate(([0], np.cumsum(rows))).astype(int)
        shape = (int(starts[-1]), *plans[0].feature_shape[1:])
        return shape, [(slice(int(a), int(b)),) for a, b in zip(starts[:-1], starts[1:])]

    def expansion(self, item: ProcessedItem) -> Expansion:
        raise NotImplementedError

    def batch_tensors(self, items: list[ProcessedItem]) -> dict[str, np.ndarray]:
        """Model-specific tensors: each item's aux rows concatenated on dim 0."""
        if not items or not items[0].aux:
            return {}
        return {k: np.concatenate([it.aux[k] for it in items], axis=0) for k in items[0].aux}

    def positions(self, applied: AppliedLayout, items: list[ProcessedItem]):
        """(positions, delta) for families with multimodal rotary positions, else None."""
        return None

    @property
    def placeholder_token_id(self) -> int:
        """The token the chat template leaves once per image in the prompt. Usually the
        image token itself; families whose expansion uses another token for the features
        (Llama 4: ``<|image|>`` in the prompt, ``<|patch|>`` for features) override it."""
        return self.image_token_id

    def token_ids(self) -> dict[str, int]:
        return {"image": self.image_token_id}

    def fingerprint(self) -> str:
        """Everything that decides this family's output for given image bytes (the
        resolved config is a frozen dataclass, so its repr is complete and stable)."""
        return f"{type(self).__module__}.{type(self).__name__}:{getattr(self, 'config', None)!r}"

    def warmup(self) -> None:
        """Run every kernel once so no request pays for compilation."""
