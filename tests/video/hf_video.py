"""The HF reference for videos (torch venv only): transformers' PyAV loader, the Qwen video
processors (torchvision backend), the processors' prompt expansion and ``get_rope_index``.

A request here is what the tests send ours: a prompt of token ids with one ``<|video_pad|>``
(and ``<|image_pad|>``) per item, the encoded videos, the model's preset. The reference
decodes each video with ``load_video(backend="pyav")`` (every frame, its metadata), lets
the video processor sample and process the frames as the model's config says, expands the
placeholder as the model's processor does (``replace_video_token``) and computes positions
with the model class's ``get_rope_index`` on a tiny config.
"""

from __future__ import annotations

import os
import tempfile
import types
import warnings

import numpy as np
import torch
from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
from transformers.video_utils import VideoMetadata, load_video

torch.set_num_threads(1)
warnings.filterwarnings("ignore")

QWEN2, QWEN25, QWEN3 = "Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"
#: The video processor each preset's checkpoint loads (transformers: video_preprocessor_config.json,
#: else preprocessor_config.json), as constructor kwargs.
PROCESSOR_KWARGS = {
    QWEN2: (Qwen2VLVideoProcessor, {"min_pixels": 3136, "max_pixels": 12845056}),
    QWEN25: (Qwen2VLVideoProcessor, {"min_pixels": 3136, "max_pixels": 12845056}),
    QWEN3: (Qwen3VLVideoProcessor, {"size": {"longest_edge": 25165824, "shortest_edge": 4096}, "fps": 2,
                                    "do_sample_frames": True, "min_frames": 4, "max_frames": 768}),
}
VIDEO, IMAGE, VSTART, VEND = 151656, 151655, 151652, 151653
#: Qwen's vocabulary ids of the timestamp text's pieces (see the Qwen3-VL preset).
PIECES = {"<": 27, ">": 29, ".": 13, " seconds": 6486, **{str(d): 15 + d for d in range(10)}}


def decode(data: bytes):
    """``load_video(path, backend="pyav")``: every frame [T, H, W, 3] and its metadata."""
    with tempfile.NamedTemporaryFile(suffix=".video", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        return load_video(path, backend="pyav")
    finally:
        os.unlink(path)


def processor(model: str, **overrides):
    cls, kwargs = PROCESSOR_KWARGS[model]
    return cls(**{**kwargs, **overrides})


def process(model: str, data: bytes, call: dict | None = None, init: dict | None = None):
    """The video processor's output and the metadata it used (frames_indices set)."""
    frames, meta = decode(data)
    proc = processor(model, **(init or {}))
    md = dict(total_num_frames=meta.total_num_frames, fps=meta.fps, duration=meta.duration, height=meta.height,
              width=meta.width, frames_indices=list(range(meta.total_num_frames)))
    out = proc(videos=[frames], video_metadata=[md], return_tensors="pt", return_metadata=True,
               cap_pixels_per_frame=False, **(call or {}))
    return out, out["video_metadata"][0], proc


def second_per_grid(proc, metadata: VideoMetadata) -> float:
    """``Qwen2_5_VLProcessor._process_videos``: temporal_patch_size / metadata.sampled_fps
    (float32 as the processor's tensor holds it)."""
    return float(torch.tensor([proc.temporal_patch_size / metadata.sampled_fps])[0])


def expansion_text(model: str, proc, grid, metadata: VideoMetadata) -> str:
    """The text the model's processor puts where the video placeholder was."""
    if model != QWEN3:
        return "<|video_pad|>" * int(np.prod(grid) // proc.merge_size**2)
    fake = types.SimpleNamespace(video_processor=proc, video_token="<|video_pad|>",
                                 vision_start_token="<|vision_start|>", vision_end_token="<|vision_end|>",
                                 _calculate_timestamps=lambda *a: Qwen3VLProcessor._calculate_timestamps(None, *a))
    inputs = {"video_grid_thw": torch.tensor([grid]), "video_metadata": [metadata]}
    return Qwen3VLProcessor.replace_video_token(fake, inputs, 0)


def text_to_ids(text: str) -> list[int]:
    """The expansion text as ids: special tokens, then each timestamp piece (Qwen's
    pre-tokenizer splits "<", each digit, ".", " seconds", ">")."""
    specials = {"<|video_pad|>": VIDEO, "<|vision_start|>": VSTART, "<|vision_end|>": VEND}
    out, i = [], 0
    while i < len(text):
        for s, tid in [*specials.items(), *PIECES.items()]:
            if text.startswith(s, i):
                out.append(tid)
                i += len(s)
                break
        else:
            raise ValueError(f"no piece at {text[i:i + 20]!r}")
    return out


def rope_index(model: str, input_ids: np.ndarray, image_grids, video_grids, second_per_grid_ts=None):
    """The model class's own ``get_rope_index`` on a tiny config (only the vision config's
    spatial_merge_size and tokens_per_second are read)."""
    cfg = {QWEN2: Qwen2VLConfig, QWEN25: Qwen2_5_VLConfig, QWEN3: Qwen3VLConfig}[model]()
    if model == QWEN25:
        cfg.vision_config.tokens_per_second = 2
    cls = {QWEN2: Qwen2VLModel, QWEN25: Qwen2_5_VLModel, QWEN3: Qwen3VLModel}[model]
    fake = types.SimpleNamespace(config=cfg)
    fake.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, fake)
    ids = torch.tensor(np.asarray(input_ids)[None, :])
    types_ = torch.zeros_like(ids, dtype=torch.int32)
    types_[ids == IMAGE] = 1
    types_[ids == VIDEO] = 2
    kwargs = {}
    if model == QWEN25 and second_per_grid_ts is not None:
        kwargs["second_per_grid_ts"] = torch.tensor(second_per_grid_ts, dtype=torch.float32)
    pos, delta = cls.get_rope_index(
        fake, ids, types_, torch.tensor(image_grids, dtype=torch.long) if image_grids else None,
        torch.tensor(video_grids, dtype=torch.long) if video_grids else None, **kwargs)
    return pos[:, 0].numpy(), int(delta.reshape(-1)[0])
