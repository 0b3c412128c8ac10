"""torchvision.transforms ``ToTensor()`` + ``Normalize(mean, std)`` as a 256-entry table.

Some remote-code processors normalize with the classic transforms rather than
transformers' backends: ``ToTensor`` divides by 255 in float32 (not a multiply by
1/255 in float64 as the PIL backend, nor the fused statistics of the torchvision
backend), then ``Normalize`` subtracts and divides by float32 mean and std.
"""

from __future__ import annotations

import numpy as np


def totensor_normalize_lut(mean, std) -> np.ndarray:
    """float32 [3, 256]: ``(float32(v) / 255 - float32(mean)) / float32(std)`` per channel."""
    mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
    std = np.atleast_1d(np.asarray(std, dtype=np.float64))
    x = np.arange(256, dtype=np.float32) / np.float32(255.0)
    lut = np.empty((3, 256), dtype=np.float32)
    for c in range(3):
        lut[c] = (x - np.float32(mean[c % len(mean)])) / np.float32(std[c % len(std)])
    return lut
