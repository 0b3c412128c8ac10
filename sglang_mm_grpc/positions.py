"""Rotary position ids. Qwen-VL's M-RoPE (HF ``get_rope_index``): text advances 1 per
token on all three rows; an image places its (t, h/merge, w/merge) grid at the current
position, then the position advances by max(h, w)/merge."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import Code, PreprocessError


@dataclass(frozen=True)
class MRope:
    """Multimodal rotary positions: one row each for time, height and width."""

    positions: np.ndarray  # int64 [3, length]
    delta: int  # max position + 1 - length (the offset of positions after the prompt)


def mrope_positions(length: int, items, merge: int) -> MRope:
    """positions int64 [3, length] and delta = max + 1 - length.

    ``items``: per image, in prompt order, ``(offset, count, (t, h, w))`` where
    offset/count is the image's token span and (t, h, w) its patch grid.
    """
    pos = np.empty((3, length), dtype=np.int64)
    cursor = 0  # first source index not yet placed
    next_pos = 0
    for offset, count, (t, h, w) in items:
        lh, lw = h // merge, w // merge
        if offset < cursor or offset + count > length or t * lh * lw != count:
            raise PreprocessError(Code.INTERNAL, "image token span does not match its grid")
        text = offset - cursor
        pos[:, cursor:offset] = np.arange(next_pos, next_pos + text)
        next_pos += text
        tt, hh, ww = np.meshgrid(np.arange(t), np.arange(lh), np.arange(lw), indexing="ij")
        pos[0, offset : offset + count] = tt.reshape(-1) + next_pos
        pos[1, offset : offset + count] = hh.reshape(-1) + next_pos
        pos[2, offset : offset + count] = ww.reshape(-1) + next_pos
        next_pos += max(lh, lw)
        cursor = offset + count
    pos[:, cursor:] = np.arange(next_pos, next_pos + (length - cursor))
    delta = int(pos.max()) + 1 - length if length else 0
    return MRope(pos, delta)
