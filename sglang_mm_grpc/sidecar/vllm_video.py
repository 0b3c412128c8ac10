"""A video as a vLLM 0.33 engine takes it: frames sampled by vLLM's video loader, the
item's fields, and vLLM's cache key of it.

vLLM samples a Qwen video's frames in its loader (vllm/multimodal/video.py: the
``qwen2_vl`` backend, ``Qwen2VLVideoBackend``, for Qwen2-VL and Qwen2.5-VL, and for the
Omni thinkers, whose model types transformers maps to ``Qwen2VLVideoProcessor``, the
connector's key (vllm/transformers_utils/processor.py
``get_video_processor_cls_name_from_config``); ``qwen3_vl``, ``Qwen3VLVideoBackend``, for
Qwen3-VL), at the loaders' default 2 fps between 4 and 768 frames, then hands the sampled
frames (with their metadata where the model's parser keeps it) to the HF processor, which
samples no further. Those loaders port HF's ``sample_frames`` (the ``qwen2_vl`` one also
clamps an index past the last frame), so the family's own sampling with these knobs
gives the same frames; the frames are decoded with PyAV here and with OpenCV there (the
same RGB frames on the H.264 clips the tests check).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..core.carriers import PreprocessOutput, VideoResult
from ..families import Family
from . import vllm_items

#: The loader's sampling (``load_bytes(fps=2)``; ``min_frames`` 4 and ``max_frames`` 768 from
#: ``compute_frames_index_to_sample``'s defaults), as the video processor's knobs.
LOADER_SAMPLING = dict(do_sample_frames=True, fps=2.0, num_frames=None, min_frames=4, max_frames=768)
#: ``create_hf_metadata``'s ``video_backend`` for the default OpenCV decoder.
VIDEO_BACKEND = "opencv"
#: The Omni thinkers' families.
OMNI = ("qwen2_5_omni", "qwen3_omni")


def takes_video(family: Family) -> bool:
    """Whether the sidecar knows what vLLM builds of this model's videos."""
    return family.name in VIDEO_FIELDS and getattr(family, "video_token_id", None) is not None


def loader_family(family: Family) -> Family:
    """``family`` sampling a video's frames as vLLM's loader for it does (itself when the
    sidecar takes no video for it)."""
    if not takes_video(family):
        return family
    return getattr(family, "with_video")(**LOADER_SAMPLING, clamp_last_index=True)


def _qwen_vl_fields(out: PreprocessOutput) -> dict[str, vllm_items.Field]:
    """The Qwen-VL factory (vllm/model_executor/models/qwen2_vl.py
    ``_create_qwen2vl_field_factory``, also Qwen3-VL's), with Qwen2.5-VL's
    ``second_per_grid_ts`` (qwen2_5_vl.py) and Qwen3-VL's per-group ``timestamps``
    (qwen3_vl.py ``_call_hf_processor``: a list of floats per video)."""
    return {
        "pixel_values_videos": vllm_items.flat_from_sizes(out.video_tensors["video_grid_thw"].prod(-1)),
        "video_grid_thw": vllm_items.Batched(keep_on_cpu=True),
        "second_per_grid_ts": vllm_items.Batched(keep_on_cpu=True),
        "timestamps": vllm_items.Batched(keep_on_cpu=True),
    }


def _omni_fields(out: PreprocessOutput) -> dict[str, vllm_items.Field]:
    """The Omni thinkers' (qwen2_5_omni_thinker.py ``create_qwen2_5_omni_thinker_field_factory``,
    also Qwen3-Omni's): Qwen2.5-VL's, and ``use_audio_in_video`` shared by the videos."""
    return {**_qwen_vl_fields(out),
            "use_audio_in_video": vllm_items.Shared(len(out.videos), keep_on_cpu=True)}


#: What each family's video items hold in vLLM.
VIDEO_FIELDS: dict[str, Callable[[PreprocessOutput], dict[str, vllm_items.Field]]] = {
    "qwen_vl": _qwen_vl_fields,
    "qwen2_5_omni": _omni_fields,
    "qwen3_omni": _omni_fields,
}


def video_batch(out: PreprocessOutput, family: str = "qwen_vl") -> dict[str, Any]:
    """The video tensors as the HF processor returns them, before vLLM's cast to the
    engine's dtype (``vllm_items.cast_floats``; Qwen3-VL's timestamps, lists of floats vLLM
    adds after that call, are not cast), and the Omni thinkers' ``use_audio_in_video``, a
    bool vLLM adds after it too (qwen2_5_omni_thinker.py ``_postprocess_hf_mm_data``:
    ``torch.tensor(use_audio_in_video)``, False: jobs carry no processor kwargs and the engine's
    are refused at start)."""
    batch: dict[str, Any] = {"pixel_values_videos": out.pixel_values_videos, **out.video_tensors}
    if any(v.timestamps_s for v in out.videos):
        batch["timestamps"] = [list(v.timestamps_s) for v in out.videos]
    if family in OMNI:
        batch["use_audio_in_video"] = np.array(False)
    return batch


def metadata(video: VideoResult) -> dict[str, Any]:
    """``VideoLoader.create_hf_metadata`` of the sampled video (keys in its order)."""
    return {
        "total_num_frames": video.total_frames,
        "fps": video.fps,
        "duration": video.total_frames / video.fps if video.fps > 0 else 0,
        "video_backend": VIDEO_BACKEND,
        "frames_indices": list(video.frame_indices),
        "do_sample_frames": len(video.frame_indices) == video.total_frames,
    }


def frames_bytes(video: VideoResult) -> int:
    """The size of the loader's sampled frames (uint8 RGB at the decoded size)."""
    return len(video.frame_indices) * video.height * video.width * 3
