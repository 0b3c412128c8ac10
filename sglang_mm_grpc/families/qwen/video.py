"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL videos (HF ``Qwen2VLVideoProcessor`` /
``Qwen3VLVideoProcessor``, torchvision backend, and their processors' prompt and positions).

Reads top to bottom like the HF code: the video processor's config (class defaults, then
the checkpoint's video_preprocessor_config.json, or its preprocessor_config.json as
transformers falls back to), frame sampling (``sample_frames`` of each class), resize
(each class's ``smart_resize``, Qwen3-VL's counting the frames), the token expansion
(``replace_video_token``: Qwen3-VL puts ``<{t:.1f} seconds>`` and vision start/end
around each temporal group), then the pixels: a temporal group of sampled frames at a time, torch's uint8 antialiased
resize, the fused rescale+normalize table and the patches in one pass
(``kernels/video_patchify``), the last frame repeated to fill a group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, NamedTuple

import numpy as np

from ...core.carriers import VideoMeta, VideoOptions
from ...core.errors import Code, PreprocessError
from ...kernels import normalize, resample_pil, resample_tv, video_patchify
from ...core.layout import Expansion
from ...core.positions import RopeSpan
from .. import hf_keys
from ..base import CLIP_MEAN, CLIP_STD, Normalization
from .common import smart_resize

IMAGENET_STANDARD = (0.5, 0.5, 0.5)
#: Token ids of the text Qwen3-VL writes before each temporal group, "<{t:.1f} seconds>":
#: its pre-tokenizer splits every digit alone, so the text is "<", the digits, ".",
#: " seconds", ">" (keys as the byte-level vocabulary spells them: "Ġseconds").
TIMESTAMP_PIECES = ("<", ">", ".", "Ġseconds", *"0123456789")


@dataclass(frozen=True)
class VideoConfig(Normalization):
    """The video processor's knobs, as transformers resolves them for the checkpoint."""

    kind: str = "qwen2"  # "qwen2": Qwen2VLVideoProcessor (Qwen2-VL, Qwen2.5-VL); "qwen3": Qwen3VLVideoProcessor
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 128 * 28 * 28  # size.shortest_edge
    max_pixels: int = 28 * 28 * 768  # size.longest_edge
    resample: int = resample_pil.BICUBIC
    do_sample_frames: bool = False
    fps: float | None = None
    num_frames: int | None = None
    min_frames: int = 4
    max_frames: int = 768
    cap_pixels_per_frame: bool = False
    max_video_tokens: int = 128000
    video_token_id: int = 151656
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653
    #: Qwen2.5-VL: vision_config.tokens_per_second (second_per_grid_ts and positions); Qwen3-Omni:
    #: the thinker's position_id_per_seconds; None otherwise.
    tokens_per_second: int | None = None
    #: Qwen3-Omni: the fps its processor divides the temporal patch by for the second per grid
    #: (the call's ``fps``, 1.0 when none: ``_process_videos``), whatever the video's; None: the
    #: sampled fps (Qwen2.5-VL).
    nominal_fps: float | None = None
    #: Qwen3-VL: ids of TIMESTAMP_PIECES, in that order (None: unknown, video refused).
    timestamp_ids: tuple[int, ...] | None = None
    timestamp_source: str = ""
    #: vLLM's ``qwen2_vl`` video loader (vllm/multimodal/video.py ``Qwen2VLVideoBackend``) clamps
    #: the index past the last frame that the float32 step can make to the last frame, and keeps
    #: it; HF's ``sample_frames`` indexes past the end (refused here) unless this is set.
    clamp_last_index: bool = False


def _class_defaults(kind: str) -> dict:
    """The HF class attributes (Qwen2VLVideoProcessor / Qwen3VLVideoProcessor)."""
    if kind == "qwen3":
        return dict(kind="qwen3", patch_size=16, min_pixels=128 * 32 * 32, max_pixels=32 * 32 * 768,
                    image_mean=IMAGENET_STANDARD, image_std=IMAGENET_STANDARD, do_sample_frames=True, fps=2.0,
                    max_video_tokens=768)
    return dict(kind="qwen2", image_mean=CLIP_MEAN, image_std=CLIP_STD)


def video_config_from_hf(video: dict, config: dict, ids: dict[str, int], timestamps: tuple | None,
                         timestamp_source: str = "") -> VideoConfig:
    """``video``: the video processor dict transformers loads (video_preprocessor_config.json,
    else preprocessor_config.json); ``config``: config.json; ``ids``: the family's token ids."""
    model_type = str(config.get("model_type") or "qwen2_vl")
    kind = "qwen3" if model_type.startswith(("qwen3_vl", "qwen3_5")) else "qwen2"
    d = VideoConfig(**_class_defaults(kind))
    g = hf_keys.get
    hf_keys.refuse_false(video, "Qwen-VL video", "do_resize", "do_convert_rgb")
    lo, hi = _bounds(video, d, kind)
    fps = g(video, "fps", default=d.fps)
    num_frames = g(video, "num_frames", default=d.num_frames)
    tps = (config.get("vision_config") or {}).get("tokens_per_second") if model_type == "qwen2_5_vl" else None
    return VideoConfig(
        **hf_keys.normalization(video, d.image_mean, d.image_std),
        kind=kind,
        patch_size=hf_keys.as_int(g(video, "patch_size", default=d.patch_size), "patch_size"),
        temporal_patch_size=hf_keys.as_int(g(video, "temporal_patch_size", default=d.temporal_patch_size),
                                           "temporal_patch_size"),
        merge_size=hf_keys.as_int(g(video, "merge_size", default=d.merge_size), "merge_size"),
        min_pixels=lo, max_pixels=hi,
        resample=hf_keys.resample(video, d.resample),
        do_sample_frames=hf_keys.flag(video, "do_sample_frames", d.do_sample_frames),
        fps=float(fps) if fps is not None else None,
        num_frames=hf_keys.as_int(num_frames, "num_frames") if num_frames is not None else None,
        min_frames=hf_keys.as_int(g(video, "min_frames", default=d.min_frames), "min_frames"),
        max_frames=hf_keys.as_int(g(video, "max_frames", default=d.max_frames), "max_frames"),
        cap_pixels_per_frame=hf_keys.flag(video, "cap_pixels_per_frame", False),
        max_video_tokens=hf_keys.as_int(g(video, "max_video_tokens", default=d.max_video_tokens), "max_video_tokens"),
        video_token_id=ids["video_token_id"], vision_start_token_id=ids["vision_start_token_id"],
        vision_end_token_id=ids["vision_end_token_id"],
        tokens_per_second=int(tps if tps is not None else 4) if model_type == "qwen2_5_vl" else None,
        timestamp_ids=timestamps if kind == "qwen3" else None,
        timestamp_source=timestamp_source if kind == "qwen3" else "",
    )


def _bounds(video: dict, d: VideoConfig, kind: str) -> tuple[int, int]:
    """size.shortest_edge / longest_edge; Qwen2VLVideoProcessor's __init__ lets top-level
    min_pixels / max_pixels replace them (Qwen3VLVideoProcessor's does not). Unlike the
    image processor, neither checks that min <= max (smart_resize tests max first)."""
    size = video.get("size") or {}
    if not isinstance(size, dict):
        raise hf_keys.ConfigError(f"video size must be an object, got {size!r}")
    g = hf_keys.get
    lo = g(size, "shortest_edge", default=d.min_pixels)
    hi = g(size, "longest_edge", default=d.max_pixels)
    if kind == "qwen2":
        lo, hi = g(video, "min_pixels", default=lo), g(video, "max_pixels", default=hi)
    return hf_keys.as_int(lo, "video min_pixels"), hf_keys.as_int(hi, "video max_pixels")


# -- sampling --------------------------------------------------------------------------


def _torch_arange_int(total: int, step: float) -> np.ndarray:
    """``torch.arange(0, total, step).int()`` (default float32 dtype): the length is
    ceil(total / step) in double, element i is float32(i * step) truncated."""
    n = math.ceil(total / step)
    return (np.arange(n, dtype=np.float64) * step).astype(np.float32).astype(np.int64)


def _bad(message: str, item: int | None) -> PreprocessError:
    return PreprocessError(Code.INVALID_ARGUMENT, message, item=item, kind="video")


def sample_qwen2(c: VideoConfig, total: int, video_fps: float, item: int | None = None) -> np.ndarray:
    """``Qwen2VLVideoProcessor.sample_frames`` (with the processor's own min/max_frames)."""
    tps = c.temporal_patch_size
    num = c.num_frames
    if num is not None:
        num = round(num / tps) * tps
    elif c.fps is not None:
        max_frames = math.floor(min(c.max_frames, total) / tps) * tps
        n = total / video_fps * c.fps
        n = min(max(n, c.min_frames), max_frames, total)
        num = math.floor(n / tps) * tps
    if num is None:
        return np.arange(total, dtype=np.int64)
    if num > total:
        raise _bad(f"sampling asks for {num} frames of a video of {total} (num_frames or fps too large)", item)
    if num <= 0:
        raise _bad(f"sampling {total} frame(s) takes {num} frames (at least {tps} are needed)", item)
    indices = _torch_arange_int(total, total / num)
    return np.minimum(indices, total - 1) if c.clamp_last_index else indices


def sample_qwen3(c: VideoConfig, total: int, video_fps: float, item: int | None = None) -> np.ndarray:
    """``Qwen3VLVideoProcessor.sample_frames``: np.linspace over the video, rounded."""
    num = c.num_frames
    if num is None and c.fps is not None:
        num = int(total / video_fps * c.fps)
        num = min(max(num, c.min_frames), c.max_frames, total)
    if num is None:
        num = min(max(total, c.min_frames), c.max_frames)
    if num <= 0:
        raise _bad(f"sampling takes {num} frames", item)
    return np.linspace(0, total - 1, num).round().astype(np.int64)


def sample(c: VideoConfig, meta: VideoMeta, item: int | None = None) -> np.ndarray:
    """The frame indices the processor takes (all frames when it does not sample)."""
    if not c.do_sample_frames:
        return np.arange(meta.total_num_frames, dtype=np.int64)
    fn = sample_qwen3 if c.kind == "qwen3" else sample_qwen2
    return fn(c, meta.total_num_frames, meta.fps, item)


# -- resize ------------------------------------------------------------------------------


def smart_resize_qwen3(num_frames: int, height: int, width: int, temporal_factor: int, factor: int,
                       min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """``qwen3_vl.video_processing_qwen3_vl.smart_resize`` (the total over the frames bounded)."""
    if num_frames < temporal_factor:
        raise ValueError(f"t:{num_frames} must be larger than temporal_factor:{temporal_factor}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resized_size(c: VideoConfig, frames: int, height: int, width: int) -> tuple[int, int]:
    """Each class's ``resize``: its smart_resize with the per-frame cap when configured."""
    factor = c.patch_size * c.merge_size
    max_pixels = c.max_pixels
    if c.kind == "qwen3":
        if c.cap_pixels_per_frame:
            per_frame = max(min(c.max_video_tokens * factor * factor, c.max_pixels // frames),
                            int(c.min_pixels * 1.05))
            max_pixels = per_frame * frames
        return smart_resize_qwen3(frames, height, width, c.temporal_patch_size, factor, c.min_pixels, max_pixels)
    if c.cap_pixels_per_frame:
        total_pixels = int(c.max_video_tokens * factor * factor * 0.9)
        max_pixels = max(min(max_pixels, total_pixels * c.temporal_patch_size // frames), int(c.min_pixels * 1.05))
    return smart_resize(height, width, factor, c.min_pixels, max_pixels)


# -- the plan ----------------------------------------------------------------------------


class VideoGrid(NamedTuple):
    t: int
    h: int
    w: int


@dataclass(frozen=True)
class VideoPlan:
    """What a video becomes, from its header alone."""

    meta: VideoMeta
    indices: tuple[int, ...]  # the sampled frames
    resized_size: tuple[int, int]
    grid: VideoGrid
    feature_shape: tuple[int, int]  # its rows of pixel_values_videos
    expansion: Expansion
    timestamps: tuple[float, ...] = ()  # Qwen3-VL, per temporal group
    second_per_grid: float | None = None  # Qwen2.5-VL
    #: per item of M-RoPE: (offset in the expansion, token count, (t, h, w), time interval or None)
    spans: tuple[RopeSpan, ...] = field(default=(), repr=False)

    @property
    def token_count(self) -> int:
        return len(self.expansion)


def timestamps_qwen3(indices, video_fps: float, temporal: int) -> list[float]:
    """``Qwen3VLProcessor._calculate_timestamps``: the last index repeated to a whole
    group, each group's first and last frame times averaged."""
    idx = [int(i) for i in indices]
    if len(idx) % temporal:
        idx.extend(idx[-1] for _ in range(temporal - len(idx) % temporal))
    ts = [i / video_fps for i in idx]
    return [(ts[i] + ts[i + temporal - 1]) / 2 for i in range(0, len(ts), temporal)]


def timestamp_tokens(ids: tuple[int, ...], seconds: float) -> list[int]:
    """The ids of ``f"<{seconds:.1f} seconds>"`` as Qwen's tokenizer splits it (``ids``:
    ``VideoConfig.timestamp_ids``)."""
    lt, gt, dot, word, *digits = ids
    out = [lt]
    for ch in f"{seconds:.1f}":
        out.append(dot if ch == "." else digits[int(ch)])
    return out + [word, gt]


def plan_video(c: VideoConfig, meta: VideoMeta, item: int | None = None) -> VideoPlan:
    """Sampling, size, grid and expansion of a video from its header facts."""
    indices = sample(c, meta, item)
    n = len(indices)
    if n == 0:
        raise _bad("the video has no frames to sample", item)
    try:
        rh, rw = resized_size(c, n, meta.height, meta.width)
    except ValueError as e:
        raise _bad(f"{meta.width}x{meta.height} video of {n} sampled frame(s): {e}", item) from None
    p, m, tps = c.patch_size, c.merge_size, c.temporal_patch_size
    if rh <= 0 or rw <= 0:
        raise _bad(f"{meta.width}x{meta.height} video resizes to {rw}x{rh}", item)
    grid = VideoGrid(-(-n // tps), rh // p, rw // p)
    per_group = grid.h * grid.w // (m * m)
    rows = (grid.t * grid.h * grid.w, 3 * tps * p * p)
    if c.kind == "qwen3":
        return _plan_qwen3(c, meta, indices, (rh, rw), grid, rows, per_group, item)
    tokens = Expansion.repeat(c.video_token_id, grid.t * per_group)
    spg: float | None = None
    interval: np.float32 | None = None
    if c.tokens_per_second is not None:  # Qwen2_5_VLProcessor: temporal_patch_size / metadata.sampled_fps
        sampled_fps = c.nominal_fps if c.nominal_fps is not None else n / meta.total_num_frames * meta.fps
        spg = tps / sampled_fps
        interval = np.float32(c.tokens_per_second) * np.float32(spg)
    spans: tuple[RopeSpan, ...] = ((0, len(tokens), (grid.t, grid.h, grid.w), interval),)
    return VideoPlan(meta, tuple(int(i) for i in indices), (rh, rw), grid, rows, tokens, (), spg, spans)


def _plan_qwen3(c: VideoConfig, meta: VideoMeta, indices, size, grid: VideoGrid, rows, per_group: int,
                item: int | None) -> VideoPlan:
    ids = c.timestamp_ids
    if ids is None:
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            "Qwen3-VL writes each frame group's timestamp as text in the prompt, and this model has no token ids "
            "for it: serve a model directory holding the checkpoint's tokenizer.json", item=item, kind="video")
    stamps = timestamps_qwen3(indices, meta.fps, c.temporal_patch_size)
    pieces: list[np.ndarray] = []
    spans: list[RopeSpan] = []
    at = 0
    for s in stamps:
        text = timestamp_tokens(ids, s)
        pieces += [np.asarray(text + [c.vision_start_token_id], np.int64),
                   np.full(per_group, c.video_token_id, np.int64), np.asarray([c.vision_end_token_id], np.int64)]
        at += len(text) + 1
        spans.append((at, per_group, (1, grid.h, grid.w), None))
        at += per_group + 1
    tokens = Expansion(np.concatenate(pieces), c.video_token_id)
    return VideoPlan(meta, tuple(int(i) for i in indices), size, grid, rows, tokens, tuple(stamps), None,
                     tuple(spans))


# -- the pixels ----------------------------------------------------------------------------


def _groups(frames: Iterable[np.ndarray], count: int, temporal: int) -> Iterator[list[np.ndarray]]:
    """The sampled frames ``temporal`` at a time, the last group filled with the last frame."""
    group: list[np.ndarray] = []
    seen = 0
    for f in frames:
        group.append(f)
        seen += 1
        if len(group) == temporal:
            yield group
            group = []
        if seen == count:
            break
    if group:
        yield group + [group[-1]] * (temporal - len(group))


def process_video(c: VideoConfig, lut: np.ndarray, frames: Iterable[np.ndarray], plan: VideoPlan,
                  out: np.ndarray) -> None:
    """Write the video's rows of pixel_values_videos (``out``, every element) from its
    sampled frames (uint8 [H, W, 3], in order, all of the stream's size: the decoder
    refuses a frame of another)."""
    rh, rw = plan.resized_size
    mode = resample_tv.PIL_FILTER_MODES[c.resample]
    per_group = plan.grid.h * plan.grid.w
    axes = None  # the two axes' coefficients, from the first frame's size
    g = 0
    for group in _groups(frames, len(plan.indices), c.temporal_patch_size):
        if axes is None:
            h, w = group[0].shape[:2]
            bh, kh = resample_tv.coeffs(w, rw, mode) if w != rw else _NO_COEFFS
            bv, kv = resample_tv.coeffs(h, rh, mode) if h != rh else _NO_COEFFS
            axes = (bh, kh, bv, kv)
        video_patchify.group_resize_patchify(group, rh, rw, *axes, lut, out[g * per_group:(g + 1) * per_group],
                                             c.patch_size, c.merge_size)
        g += 1
    if g != plan.grid.t:
        raise PreprocessError(Code.INTERNAL, f"video gave {g} temporal groups, planned {plan.grid.t}", kind="video")


_NO_COEFFS = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))


def video_lut(c: VideoConfig) -> np.ndarray:
    """The torchvision backend's fused rescale+normalize table for these knobs."""
    return c.lut(normalize.torchvision_backend_lut)


def with_options(c: VideoConfig, o: VideoOptions) -> VideoConfig:
    """The processor as a call with these kwargs configures it (fps / num_frames turn
    sampling on, as ``do_sample_frames=True`` with them); INVALID_ARGUMENT naming a
    field that cannot be honoured."""
    _check(o)
    changes: dict = {}
    if o.fps is not None or o.num_frames is not None:
        changes.update(do_sample_frames=True, fps=o.fps, num_frames=o.num_frames)
    for name in ("min_frames", "max_frames"):
        if getattr(o, name) is not None:
            changes[name] = getattr(o, name)
    _check_frame_bounds(c, o)
    lo = o.min_pixels if o.min_pixels is not None else c.min_pixels
    hi = o.max_pixels if o.max_pixels is not None else c.max_pixels
    if lo > hi:
        raise PreprocessError(Code.INVALID_ARGUMENT, f"min_pixels {lo} is above max_pixels {hi}", kind="video")
    changes.update(min_pixels=lo, max_pixels=hi)
    return replace(c, **changes)


def _check_frame_bounds(c: VideoConfig, o: VideoOptions) -> None:
    """min_frames above max_frames (the request's options after merging, the model's where
    unset): HF's ``sample_frames`` (both classes) computes ``min(max(n, min_frames),
    max_frames, ...)``, so max_frames wins and the min_frames asked is silently not
    honoured: refused. A max_frames asked below the model's own min_frames is honoured
    exactly (it wins), as is a checkpoint whose own bounds cross: both kept."""
    if o.min_frames is None:
        return
    hi = o.max_frames if o.max_frames is not None else c.max_frames
    if o.min_frames > hi:
        whose = "" if o.max_frames is not None else " (the model's default; ask a larger max_frames too)"
        raise PreprocessError(Code.INVALID_ARGUMENT, f"min_frames {o.min_frames} is above max_frames {hi}{whose}: "
                              "sampling never takes more than max_frames", kind="video")


def _check(o: VideoOptions) -> None:
    if o.fps is not None and o.num_frames is not None:
        raise PreprocessError(Code.INVALID_ARGUMENT, "fps and num_frames are mutually exclusive: give one",
                              kind="video")
    if o.fps is not None and (isinstance(o.fps, bool) or not isinstance(o.fps, (int, float)) or not o.fps > 0
                              or not math.isfinite(o.fps)):
        raise PreprocessError(Code.INVALID_ARGUMENT, f"fps must be a positive number, got {o.fps!r}", kind="video")
    for name in ("num_frames", "min_frames", "max_frames", "min_pixels", "max_pixels", "max_tokens"):
        v = getattr(o, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise PreprocessError(Code.INVALID_ARGUMENT, f"{name} must be a positive integer, got {v!r}",
                                  kind="video")
