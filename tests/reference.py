"""The parity reference: the installed transformers processors, fed as PARITY.md says."""

from __future__ import annotations

import io
import logging
import warnings

import numpy as np
from PIL import Image, ImageOps

logging.getLogger("transformers").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", module="transformers")


def reference_input(raw: bytes) -> Image.Image:
    """What the HF processor is handed: EXIF-transposed PIL image, first frame."""
    return ImageOps.exif_transpose(Image.open(io.BytesIO(raw)))


def qwen_reference(preprocessor_config: dict):
    from transformers import Qwen2VLImageProcessorPil

    cfg = {k: v for k, v in preprocessor_config.items() if k not in ("image_processor_type", "processor_class")}
    return Qwen2VLImageProcessorPil(**cfg)


def run_reference(processor, raws: list[bytes]) -> dict[str, np.ndarray]:
    out = processor([reference_input(r) for r in raws], return_tensors="np")
    return {k: np.asarray(v) for k, v in out.items()}
