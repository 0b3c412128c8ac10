"""sglang-mm-grpc: image preprocessing for VLM gateways, exact to HuggingFace.

    from sglang_mm_grpc import Preprocessor
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct")
    out = pp.preprocess([jpeg_bytes], input_ids=None)

The names below load on first use: the client and the CLI's remote commands, which
need no kernels, start without importing numba.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core.carriers import ImageOptions, ImageResult, PlanOutput, PreprocessOutput
    from .core.errors import Code, PreprocessError
    from .pipeline.driver import Preprocessor

__version__ = "0.1.0"

#: Each exported name -> the module that defines it.
_EXPORTS = {
    "ImageOptions": "core.carriers", "ImageResult": "core.carriers", "PlanOutput": "core.carriers",
    "PreprocessOutput": "core.carriers", "Code": "core.errors", "PreprocessError": "core.errors",
    "Preprocessor": "pipeline.driver",
}

__all__ = ["Code", "ImageOptions", "ImageResult", "PlanOutput", "PreprocessError", "PreprocessOutput", "Preprocessor",
           "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value
