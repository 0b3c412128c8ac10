"""How a request's items share one pixel_values: its shape and each item's slot in it.

A slot is an index tuple whose view has the item's ``feature_shape``. Slots never
overlap; where they do not cover the whole batch the driver zeroes it (padding).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

#: An item's index into pixel_values (its view has the item's ``feature_shape``).
Slot = tuple[int | slice, ...]
Slots = list[Slot]


class Shaped(Protocol):
    """What batching reads of an item's plan (``base.ItemPlan``)."""

    @property
    def feature_shape(self) -> tuple[int, ...]: ...


def concat_rows(plans: Sequence[Shaped]) -> tuple[tuple[int, ...], Slots]:
    """Items one after another on dim 0 (flat patch rows, tiles)."""
    rows = [p.feature_shape[0] for p in plans]
    starts = np.concatenate(([0], np.cumsum(rows))).astype(int)
    shape = (int(starts[-1]), *plans[0].feature_shape[1:])
    return shape, [(slice(int(a), int(b)),) for a, b in zip(starts[:-1], starts[1:])]


def stacked(plans: Sequence[Shaped]) -> tuple[tuple[int, ...], Slots]:
    """[N, *feature_shape]: every item has the same shape."""
    return (len(plans), *plans[0].feature_shape), [(i,) for i in range(len(plans))]


def stacked_padded_rows(plans: Sequence[Shaped]) -> tuple[tuple[int, ...], Slots]:
    """[N, most rows, ...]: items with fewer rows (tiles, crops) are zero-padded."""
    most = max(p.feature_shape[0] for p in plans)
    shape = (len(plans), most, *plans[0].feature_shape[1:])
    return shape, [(i, slice(0, p.feature_shape[0])) for i, p in enumerate(plans)]


def padded_planes(plans: Sequence[Shaped]) -> tuple[tuple[int, ...], Slots]:
    """[N, C, max H, max W]: item i fills the top-left of its planes; the rest is 0."""
    max_h = max(p.feature_shape[1] for p in plans)
    max_w = max(p.feature_shape[2] for p in plans)
    slots: Slots = [(i, slice(None), slice(0, p.feature_shape[1]), slice(0, p.feature_shape[2]))
                    for i, p in enumerate(plans)]
    return (len(plans), plans[0].feature_shape[0], max_h, max_w), slots
