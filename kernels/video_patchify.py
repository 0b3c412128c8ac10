"""Normalize + patchify one temporal group of video frames into merge-block-major rows.

Video processors patchify ``[T, C, H, W]`` frames by
``view(grid_t, temporal, C, gh/m, m, p, gw/m, m, p).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)``:
rows are (block row, block column, sub-row, sub-column) of one temporal group, columns
(channel, frame of the group, patch row, patch column). Unlike an image, whose temporal
copies repeat one frame, each frame of the group fills its own columns. Each frame row
is normalized once through the fused rescale+normalize table (``normalize.normalize_row``)
into planar rows that stay in cache; every output element is written once.
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from .normalize import arithmetic, copy_run, normalize_row


@functools.lru_cache(maxsize=None)
def _specialized(patch: int, merge: int, temporal: int):
    """The kernel with the geometry as constants (straight vector code for the moves)."""
    band = patch * merge

    @numba.njit(nogil=True, cache=True)
    def kernel(frames, coef, lut, out):
        h, w = frames.shape[1], frames.shape[2]
        gw = w // patch
        pp = patch * patch
        width = 3 * temporal * pp
        flat = out.reshape(out.size)
        rows = np.empty((temporal, merge, 3, patch, w), np.float32)  # one band of each frame, planar
        r = 0
        for bi in range(h // band):
            for t in range(temporal):
                for mh in range(merge):
                    for py in range(patch):
                        src = frames[t, (bi * merge + mh) * patch + py].reshape(-1)
                        normalize_row(src, w, coef, lut, rows[t, mh, 0, py], rows[t, mh, 1, py], rows[t, mh, 2, py],
                                      3)
            for bj in range(gw // merge):
                for mh in range(merge):
                    for mw in range(merge):
                        base = (r + mh * merge + mw) * width
                        x0 = (bj * merge + mw) * patch
                        for c in range(3):
                            for t in range(temporal):
                                o = base + (c * temporal + t) * pp
                                for py in range(patch):
                                    copy_run(flat, o + py * patch, rows[t, mh, c, py], x0, patch)
                r += merge * merge

    return kernel


def group_patchify(frames: np.ndarray, lut: np.ndarray, out: np.ndarray, patch: int, merge: int) -> None:
    """uint8 [temporal, H, W, 3] (one temporal group, H and W multiples of patch*merge)
    -> ``out`` float32 [(H/patch)*(W/patch), 3*temporal*patch*patch], C-contiguous."""
    if frames.ndim != 4 or frames.shape[3] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 [T, H, W, 3], got {frames.dtype} {frames.shape}")
    t, h, w = frames.shape[:3]
    band = patch * merge
    if h % band or w % band:
        raise ValueError(f"frame size {h}x{w} is not a multiple of {band}")
    if not out.flags.c_contiguous or out.shape != ((h // patch) * (w // patch), 3 * t * patch * patch):
        raise ValueError(f"out must be C-contiguous float32 of {(h // patch) * (w // patch)} x {3 * t * patch**2}")
    lut = np.ascontiguousarray(lut, dtype=np.float32)
    _specialized(int(patch), int(merge), int(t))(np.ascontiguousarray(frames), arithmetic(lut), lut, out)


def warmup(patch: int = 14, merge: int = 2, temporal: int = 2) -> None:
    """Compile (or load from the on-disk cache) the kernel for this geometry."""
    side = patch * merge
    frames = np.zeros((temporal, side, side, 3), np.uint8)
    out = np.empty((merge * merge, 3 * temporal * patch * patch), np.float32)
    group_patchify(frames, np.zeros((3, 256), np.float32), out, patch, merge)
