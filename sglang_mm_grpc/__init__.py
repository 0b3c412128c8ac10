"""sglang-mm-grpc: image preprocessing for VLM gateways, exact to HuggingFace.

    from sglang_mm_grpc import Preprocessor
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct")
    out = pp.preprocess([jpeg_bytes], input_ids=None)
"""

from .core.carriers import ImageOptions, ImageResult, PlanOutput, PreprocessOutput
from .pipeline.driver import Preprocessor
from .core.errors import Code, PreprocessError

__version__ = "0.1.0"

__all__ = ["Code", "ImageOptions", "ImageResult", "PlanOutput", "PreprocessError", "PreprocessOutput", "Preprocessor",
           "__version__"]
