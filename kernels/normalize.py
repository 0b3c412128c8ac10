"""Rescale + normalize as 256-entry per-channel lookup tables.

A uint8 input has only 256 values per channel, so computing the HF arithmetic once per
value and looking it up is exact by construction and costs one load per element.
"""

from __future__ import annotations

import numpy as np


def pil_backend_lut(
    mean, std, rescale_factor: float = 1 / 255, do_rescale: bool = True, do_normalize: bool = True
) -> np.ndarray:
    """float32 [C, 256]: the HF PIL backend's ``rescale`` then ``normalize`` of each value.

    ``rescale`` is ``(x.astype(float64) * factor).astype(float32)``; ``normalize`` is
    ``(x - float32(mean)) / float32(std)`` in float32 (uint8 is first cast to float32).
    """
    mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
    std = np.atleast_1d(np.asarray(std, dtype=np.float64))
    channels = max(len(mean), len(std), 3) if do_normalize else 3
    values = np.arange(256, dtype=np.uint8)
    x = (values.astype(np.float64) * rescale_factor).astype(np.float32) if do_rescale else values.astype(np.float32)
    lut = np.empty((channels, 256), dtype=np.float32)
    for c in range(channels):
        if do_normalize:
            m = np.float32(mean[c % len(mean)])
            s = np.float32(std[c % len(std)])
            lut[c] = (x - m) / s
        else:
            lut[c] = x
    return lut


def torchvision_backend_lut(
    mean, std, rescale_factor: float = 1 / 255, do_rescale: bool = True, do_normalize: bool = True
) -> np.ndarray:
    """float32 [C, 256]: the HF torchvision backend's fused rescale+normalize.

    With both steps on, transformers folds the rescale into the statistics:
    ``mean' = float32(mean) * (1/factor)`` and ``std'`` likewise (float32 products), then
    ``(float32(x) - mean') / std'``. One of them alone is applied as is.
    """
    mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
    std = np.atleast_1d(np.asarray(std, dtype=np.float64))
    x = np.arange(256, dtype=np.float32)
    lut = np.empty((3, 256), dtype=np.float32)
    inv = np.float32(1.0 / rescale_factor)
    for c in range(3):
        m = np.float32(mean[c % len(mean)])
        s = np.float32(std[c % len(std)])
        if do_rescale and do_normalize:
            lut[c] = (x - np.float32(m * inv)) / np.float32(s * inv)
        elif do_normalize:
            lut[c] = (x - m) / s
        elif do_rescale:
            lut[c] = x * np.float32(rescale_factor)
        else:
            lut[c] = x
    return lut
