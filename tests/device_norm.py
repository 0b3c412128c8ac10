"""vLLM's device normalization of raw uint8 pixels, transcribed for the tests (vLLM itself
needs a ~10 GB venv with CUDA torch, which CI does not install).

Source: vLLM 0.33.0 (the wheel on the package index),
``vllm/model_executor/layers/fusion/mm_input_norm.py``, ``FusedMMInputNorm``:

    weight = (rescale_factor / std)            # float32 buffers (``__init__``)
    bias = (-mean / std)
    x = pixel_values.reshape(patches, channel, patch_size)       # ``forward_native``
    x = x * weight.view(1, channel, 1) + bias.view(1, channel, 1)  # fp32 arithmetic

applied to Qwen-VL's ``pixel_values`` (patches, C*T*p*p) in ``Qwen2VisionTransformer``
and, for Mistral 3, to each [3, H, W] image unfolded into [C][ph][pw] rows
(``vllm/model_executor/models/pixtral.py`` ``pixtral_patch_embed``): per channel either way.
``mean`` / ``std`` / ``rescale_factor`` are the checkpoint's processor config values
(``_load_norm_params``).
"""

from __future__ import annotations

import numpy as np


def device_normalize(pixels: np.ndarray, mean, std, rescale_factor: float = 1 / 255) -> np.ndarray:
    """float32 pixels as vLLM's device normalization makes them from raw ``pixels``: a
    2-D (patches, C * k) tensor channel-major within each row, or [N, C, H, W] images."""
    mean = np.asarray(mean, dtype=np.float32)
    std = np.asarray(std, dtype=np.float32)
    weight = np.float32(rescale_factor) / std
    bias = -mean / std
    c = len(mean)
    x = np.asarray(pixels)
    if x.ndim == 2:
        view = x.reshape(x.shape[0], c, -1).astype(np.float32)
        return (view * weight.reshape(1, c, 1) + bias.reshape(1, c, 1)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return x.astype(np.float32) * weight.reshape(shape) + bias.reshape(shape)
