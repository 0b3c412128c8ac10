"""Rotary position ids. Qwen-VL's M-RoPE (HF ``get_rope_index``): text advances 1 per
token on all three rows; an image places its (t, h/merge, w/merge) grid at the current
position, then the position advances by max(h, w)/merge. A video does the same with its
temporal index scaled by a time interval when it has one (Qwen2.5-VL:
tokens_per_second * second_per_grid_ts, in float32 and truncated as torch computes it);
Qwen3-VL's videos come as one item per frame group (t = 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, SupportsFloat

import numpy as np

from .errors import Code, PreprocessError


@dataclass(frozen=True)
class MRope:
    """Multimodal rotary positions: one row each for time, height and width."""

    positions: np.ndarray  # int64 [3, length]
    delta: int  # max position + 1 - length (the offset of positions after the prompt)


#: One item of M-RoPE (an image, a video or one of its frame groups): its token span
#: (offset, count), its (t, h, w) patch grid and its temporal interval (a float32, or
#: None: t advances by 1).
RopeSpan = tuple[int, int, tuple[int, int, int], SupportsFloat | None]


def mrope_positions(length: int, items: Iterable[RopeSpan | tuple[int, int, tuple[int, int, int]]],
                    merge: int, after_max: bool = False) -> MRope:
    """positions int64 [3, length] and delta = max + 1 - length.

    ``items``: per image or video, in prompt order, ``(offset, count, (t, h, w))`` or
    ``(offset, count, (t, h, w), interval)`` where offset/count is the item's token span,
    (t, h, w) its patch grid and interval (float32, or None) its temporal spacing. The text
    after an item starts ``max(h, w) / merge`` past the item's start (transformers 5.24's
    Qwen2/2.5/3-VL), or with ``after_max`` one past the item's largest position, its
    temporal ones included (Qwen3-Omni's ``get_rope_index``).
    """
    pos = np.empty((3, length), dtype=np.int64)
    cursor = 0  # first source index not yet placed
    next_pos = 0
    for offset, count, (t, h, w), *rest in items:
        interval = rest[0] if rest else None
        lh, lw = h // merge, w // merge
        if offset < cursor or offset + count > length or t * lh * lw != count:
            raise PreprocessError(Code.INTERNAL, "image token span does not match its grid")
        text = offset - cursor
        pos[:, cursor:offset] = np.arange(next_pos, next_pos + text)
        next_pos += text
        ts = np.arange(t) if interval is None else (np.arange(t, dtype=np.float32) * np.float32(interval)).astype(
            np.int64)
        tt, hh, ww = np.meshgrid(ts, np.arange(lh), np.arange(lw), indexing="ij")
        pos[0, offset : offset + count] = tt.reshape(-1) + next_pos
        pos[1, offset : offset + count] = hh.reshape(-1) + next_pos
        pos[2, offset : offset + count] = ww.reshape(-1) + next_pos
        next_pos += max(lh, lw, int(ts[-1]) + 1 if after_max and t else 0)
        cursor = offset + count
    pos[:, cursor:] = np.arange(next_pos, next_pos + (length - cursor))
    delta = int(pos.max()) + 1 - length if length else 0
    return MRope(pos, delta)
