"""The token layout: one value from which expansion and every range derive.

A family answers "what does image i expand into"; this module places those expansions
at the placeholders, so the expanded ids, the structural ranges and the patch-only
ranges cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import invalid


@dataclass(frozen=True)
class Expansion:
    """The tokens one image becomes. ``patch_id`` marks the tokens that carry features."""

    tokens: np.ndarray  # int64 [n]
    patch_id: int

    @classmethod
    def repeat(cls, token_id: int, count: int) -> "Expansion":
        return cls(np.full(count, token_id, dtype=np.int64), token_id)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def features(self) -> int:
        """The tokens that carry features (what an engine's encoder budget counts)."""
        return int(np.count_nonzero(self.tokens == self.patch_id))


@dataclass(frozen=True)
class TokenLayout:
    """Where each image's expansion replaces its placeholder in the source ids."""

    source_ids: np.ndarray  # int64, one placeholder per image
    placeholder_positions: np.ndarray  # int64 [n_images], ascending
    expansions: tuple[Expansion, ...]


@dataclass(frozen=True)
class AppliedLayout:
    input_ids: np.ndarray  # int64 expanded
    structural_ranges: tuple[tuple[int, int], ...]  # (offset, length) per image
    patch_ranges: tuple[tuple[tuple[int, int], ...], ...]  # runs of patch_id per image


def find_placeholders(source_ids, placeholder_id: int, images: int, kind: str = "image") -> np.ndarray:
    """The positions of ``placeholder_id`` in ``source_ids``, exactly one per image (or
    per item of another ``kind``: "video").

    Refuses a placeholder count that differs from the image count: a silent mismatch
    would shift every later image onto the wrong tokens.
    """
    ids = np.asarray(source_ids, dtype=np.int64).reshape(-1)
    positions = np.flatnonzero(ids == placeholder_id)
    if len(positions) != images:
        raise invalid(
            f"input_ids hold {len(positions)} {kind} placeholder(s) (token id {placeholder_id}) "
            f"but the request has {images} {kind}(s); put exactly one placeholder per {kind}"
        )
    return positions.astype(np.int64)


def placeholder_layout(source_ids, placeholder_id: int, expansions) -> TokenLayout:
    """The i-th ``placeholder_id`` in ``source_ids`` becomes ``expansions[i]``."""
    ids = np.asarray(source_ids, dtype=np.int64).reshape(-1)
    return layout_at(ids, find_placeholders(ids, placeholder_id, len(expansions)), expansions)


def layout_at(source_ids: np.ndarray, positions: np.ndarray, expansions) -> TokenLayout:
    """The placeholder at ``positions[i]`` (found by ``find_placeholders``) becomes ``expansions[i]``."""
    for i, e in enumerate(expansions):
        if len(e) == 0:
            raise invalid("image expands to 0 tokens", item=i)
    return TokenLayout(source_ids, positions, tuple(expansions))


def _runs(tokens: np.ndarray, token_id: int, offset: int) -> tuple[tuple[int, int], ...]:
    mask = np.concatenate(([False], tokens == token_id, [False]))
    edges = np.flatnonzero(mask[1:] != mask[:-1])
    starts, ends = edges[0::2], edges[1::2]
    return tuple((offset + int(s), int(e - s)) for s, e in zip(starts, ends))


def apply_layout(layout: TokenLayout) -> AppliedLayout:
    """Expand the ids and derive every range from the same walk."""
    src = layout.source_ids
    pieces = []
    structural = []
    patches = []
    cursor = 0
    out_len = 0
    for pos, expansion in zip(layout.placeholder_positions.tolist(), layout.expansions):
        pieces.append(src[cursor:pos])
        out_len += pos - cursor
        structural.append((out_len, len(expansion)))
        patches.append(_runs(expansion.tokens, expansion.patch_id, out_len))
        pieces.append(expansion.tokens)
        out_len += len(expansion)
        cursor = pos + 1
    pieces.append(src[cursor:])
    ids = np.concatenate(pieces) if pieces else src.copy()
    return AppliedLayout(ids.astype(np.int64, copy=False), tuple(structural), tuple(patches))


def apply_groups(source_ids: np.ndarray, groups: Sequence[tuple[np.ndarray, Sequence[Expansion]]]
                 ) -> tuple[AppliedLayout, list[AppliedLayout]]:
    """Items of several kinds (images, videos, audio clips: each a group of placeholder
    positions and their expansions) expanded in one walk: the whole layout, and each
    group's view of it (the expanded ids with that group's ranges, in its own order)."""
    at = np.concatenate([np.asarray(positions, np.int64) for positions, _ in groups])
    order = np.argsort(at, kind="stable")
    expansions = [e for _, exps in groups for e in exps]
    applied = apply_layout(layout_at(source_ids, at[order], [expansions[k] for k in order]))
    ranges: list[tuple[int, int]] = [(0, 0)] * len(at)  # every entry set below: ``order`` is a permutation
    runs: list[tuple[tuple[int, int], ...]] = [()] * len(at)
    for j, k in enumerate(order):
        ranges[k], runs[k] = applied.structural_ranges[j], applied.patch_ranges[j]
    views, start = [], 0
    for positions, _ in groups:
        end = start + len(positions)
        views.append(AppliedLayout(applied.input_ids, tuple(ranges[start:end]), tuple(runs[start:end])))
        start = end
    return applied, views
