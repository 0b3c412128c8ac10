"""A request's videos: configure, admit (header, sampling plan, token budget), process.

    configure each video (the video processor as the request's options set it)
    -> admit each video (hash; the container header probed and held to the limits; the
       frames sampled, the size and the expansion planned; the token budget checked)
    -> [the driver lays out images and videos together]
    -> process each video: decode only its sampled frames, resize, normalize and patchify
       a temporal group at a time into its rows of pixel_values_videos

Nothing is decoded before the plan passes its budget, and a video's frames never all
exist at once: each temporal group is written as soon as its frames are decoded. A video
the preprocessing cache holds (same bytes, model spec and effective video processor) is
neither probed nor decoded: its plan and rows come from the cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence

import numpy as np

from .cache import CachedVideo, PreprocessCache, video_key
from ..core.carriers import VideoMeta, VideoOptions, VideoResult
from ..core.errors import Code, PreprocessError
from ..families import Family, VideoFamily
from ..families.base import Aux
from ..families.video import VC, VP, VideoPlan
from ..core.hashing import content_hash
from ..core.layout import AppliedLayout, Expansion, find_placeholders
from ..core.positions import RopeSpan
from ..media import video as media_video

#: Videos in one request, unless configured otherwise.
DEFAULT_MAX_VIDEOS = 8
#: Tokens one video may expand into, unless configured otherwise (a request may lower it).
#: A 10 s 1280x720 clip sampled at 2 fps takes 11960 on Qwen2/2.5-VL (20 frames of
#: 728x1288) and 8960 on Qwen3-VL (20 frames of 704x1280, timestamps included); Qwen2/2.5-VL's
#: own default samples every frame (``do_sample_frames`` false), 179400 tokens for that
#: clip at 30 fps, more than their context: such a video asks for ``fps`` or ``num_frames``.
DEFAULT_MAX_VIDEO_TOKENS = 32768

#: ``each(fn, count)``: fn(0), ..., fn(count - 1), their results in order (the driver's fan-out).
Each = Callable[[Callable[[int], Aux], int], list[Aux]]
#: ``allocate(shape, name, dtype)``: memory of the caller's for a tensor, or None (see ``Preprocessor.preprocess``).
Allocate = Callable[[tuple[int, ...], str, np.dtype[Any]], np.ndarray | None]


@dataclass(frozen=True)
class VideoTarget(Generic[VC]):
    """What one video is processed by: the effective video processor, the options asked
    (merged), and the token budget it is held to."""

    config: VC  # the family's video processor config (``VideoFamily.video_config``)
    options: VideoOptions
    budget: tuple[int, str]
    encoder_budget: int = 0  # the most feature tokens (the worker's mm_encoder_budget); 0: none


@dataclass
class AdmittedVideo(Generic[VC, VP]):
    hash: str
    data: bytes
    plan: VP  # the family's plan of the video (``VideoFamily.plan_video``)
    target: VideoTarget[VC]
    decode_ms: float = 0.0
    process_ms: float = 0.0
    rotation: int = 0
    cached: CachedVideo[VP] | None = None
    key: tuple[str, str] | None = None  # its cache key when a cache is in use


def check_family(family: Family, videos: int) -> None:
    """FAILED_PRECONDITION when videos come to a model that takes none, or without PyAV."""
    if not videos:
        return
    video_family(family, f" ({videos} video(s) in the request)")
    if not media_video.video_available():
        raise PreprocessError(Code.FAILED_PRECONDITION, media_video.INSTALL_HINT)


def video_family(family: Family, why: str = "") -> VideoFamily:
    """The family's video side (``families.video.VideoFamily``): FAILED_PRECONDITION when
    it takes no video (``why``: what the request brought)."""
    if not isinstance(family, VideoFamily) or "video" not in family.modalities:
        raise PreprocessError(Code.FAILED_PRECONDITION, f"the {family.name} family takes no video{why}")
    return family


def video_token(family: Family) -> int:
    """The video placeholder's token id: FAILED_PRECONDITION when the family has none (no
    video processor for this model)."""
    if family.video_token_id is None:
        raise PreprocessError(Code.FAILED_PRECONDITION, f"the {family.name} family has no video processor "
                              "configured for this model", kind="video")
    return family.video_token_id


def video_placeholders(family: Family, ids: np.ndarray, videos: int) -> np.ndarray:
    """The video placeholders' positions, exactly one per video."""
    if not videos:
        return np.zeros(0, np.int64)
    return find_placeholders(ids, video_token(family), videos, "video")


def configure(family: Family, count: int, max_tokens: int, options: VideoOptions | None,
              per_video: Sequence[VideoOptions | None] | None, encoder_budget: int = 0) -> list[VideoTarget[Any]]:
    """Each video's processor (its options over the request's, field by field) and budgets."""
    if per_video is not None and len(per_video) != count:
        raise PreprocessError(Code.INVALID_ARGUMENT, f"{len(per_video)} per-video options for {count} video(s)")
    if not count:
        return []
    return _configure(video_family(family), count, max_tokens, options, per_video, encoder_budget)


def _configure(family: VideoFamily[Any, Any, VC, Any], count: int, max_tokens: int, options: VideoOptions | None,
               per_video: Sequence[VideoOptions | None] | None, encoder_budget: int) -> list[VideoTarget[VC]]:
    base = options if options is not None else VideoOptions()
    out = []
    for i in range(count):
        merged = base.merged(per_video[i] if per_video is not None else None)
        try:
            config = family.video_config(merged)
        except PreprocessError as e:
            raise PreprocessError(e.code, e.detail, item=i, kind="video") from None
        budget = (max_tokens, "the model's max_video_tokens")
        if merged.max_tokens is not None and merged.max_tokens < max_tokens:
            budget = (merged.max_tokens, "the video's max_tokens option")
        out.append(VideoTarget(config, merged, budget, encoder_budget))
    return out


def admit(family: Family, data: bytes, i: int, target: VideoTarget[Any], limits: media_video.VideoLimits,
          known: str | None = None, cache: PreprocessCache | None = None, spec_key: str = "",
          peek: bool = False) -> AdmittedVideo[Any, Any]:
    """Hash; the cached plan, or the header probed (limits) and planned (sampling, size,
    expansion); the budget checked either way. ``peek``: look at the cache without
    counting or refreshing (a plan)."""
    return _admit(video_family(family), data, i, target, limits, known, cache, spec_key, peek)


def _admit(family: VideoFamily[Any, Any, VC, VP], data: bytes, i: int, target: VideoTarget[VC],
           limits: media_video.VideoLimits, known: str | None, cache: PreprocessCache | None, spec_key: str,
           peek: bool) -> AdmittedVideo[VC, VP]:
    h = known or content_hash(data)
    key = video_key(h, spec_key, target.config) if cache is not None else None
    hit = None if cache is None or key is None else (cache.peek(key) if peek else cache.get(key))
    if isinstance(hit, CachedVideo):
        plan: VP = hit.plan
        media_video.check_limits(plan.meta, len(data), limits, i)
        _check_plan(plan, plan.meta, i, target, limits)
        return AdmittedVideo(h, data, plan, target, rotation=hit.rotation, cached=hit, key=key)
    meta = media_video.probe(data, limits, item=i)
    plan = family.plan_video(target.config, meta, i)
    _check_plan(plan, meta, i, target, limits)
    return AdmittedVideo(h, data, plan, target, key=key)


def _check_plan(plan: VideoPlan, meta: VideoMeta, i: int, target: VideoTarget[Any],
                limits: media_video.VideoLimits) -> None:
    """The sampled frames and the tokens within their limits."""
    if len(plan.indices) > limits.max_sampled_frames:
        raise PreprocessError(Code.RESOURCE_EXHAUSTED, f"sampling takes {len(plan.indices)} frames, over the limit "
                              f"of {limits.max_sampled_frames} (max_sampled_frames)", item=i, kind="video")
    features = plan.expansion.features
    if target.encoder_budget and features > target.encoder_budget:
        raise PreprocessError(
            Code.RESOURCE_EXHAUSTED,
            f"{meta.width}x{meta.height} video of {len(plan.indices)} sampled frames carries {features} feature "
            f"tokens, over the worker's encoder budget of {target.encoder_budget} per item (its server info's "
            "mm_encoder_budget: the engine could never schedule it); not decoded. Ask for fewer frames (fps or "
            "num_frames) or fewer pixels per frame (max_pixels)", item=i, kind="video")
    limit, source = target.budget
    if plan.token_count > limit:
        raise PreprocessError(
            Code.RESOURCE_EXHAUSTED,
            f"{meta.width}x{meta.height} video of {len(plan.indices)} sampled frames expands into {plan.token_count} "
            f"tokens, over the budget of {limit} tokens per video ({source}); not decoded. Ask for fewer frames "
            "(fps or num_frames) or fewer pixels per frame (max_pixels)", item=i, kind="video")


def process(family: Family, admitted: list[AdmittedVideo[Any, Any]], limits: media_video.VideoLimits,
            deadline: float | None, each: Each, cache: PreprocessCache | None = None, allocate: Allocate | None = None
            ) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
    """pixel_values_videos (every row written once) and the video tensors; a lone cached
    video's are the cached arrays themselves (read-only, no copy). ``allocate(shape,
    name, dtype)``: the driver's (memory of the caller's, e.g. a shared-memory segment, or
    None). The dtype is the family's (float32, or uint8 for a raw variant)."""
    if not admitted:
        return None, {}
    if len(admitted) == 1 and admitted[0].cached is not None:
        return admitted[0].cached.pixel_values, dict(admitted[0].cached.aux)
    return _process(video_family(family), admitted, limits, deadline, each, cache, allocate)


def _process(family: VideoFamily[Any, Any, VC, VP], admitted: list[AdmittedVideo[VC, VP]],
             limits: media_video.VideoLimits, deadline: float | None, each: Each, cache: PreprocessCache | None,
             allocate: Allocate | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rows = [a.plan.feature_shape[0] for a in admitted]
    starts = np.concatenate(([0], np.cumsum(rows))).astype(int)
    shape = (int(starts[-1]), admitted[0].plan.feature_shape[1])
    lent = allocate(shape, "pixel_values_videos", family.pixel_dtype) if allocate is not None else None
    out = lent if lent is not None else np.empty(shape, family.pixel_dtype)

    def one(i: int) -> Aux:
        a = admitted[i]
        if a.cached is not None:
            out[starts[i]:starts[i + 1]] = a.cached.pixel_values
            return a.cached.aux
        t0 = time.perf_counter()
        rotation: list[int] = []
        decoded = media_video.frames(a.data, a.plan.indices, a.plan.meta, limits, i, deadline, rotation)
        try:
            aux = family.process_video(a.target.config, _timed(decoded, a), a.plan, out[starts[i]:starts[i + 1]])
        finally:
            decoded.close()  # the container, at once
        a.process_ms = (time.perf_counter() - t0) * 1e3 - a.decode_ms
        a.rotation = rotation[0] if rotation else a.plan.meta.rotation
        return aux

    aux = each(one, len(admitted))
    if cache is not None:
        _keep(cache, admitted, out, starts, aux, lent is not None)
    return out, {k: np.concatenate([x[k] for x in aux], axis=0) for k in aux[0]}


def _keep(cache: PreprocessCache, admitted: list[AdmittedVideo[VC, VP]], out: np.ndarray, starts: np.ndarray,
          aux: list[Aux], lent: bool = False) -> None:
    """Each newly processed video into the cache: a lone video's rows are the request's
    own array (made read-only, no copy), unless that memory is the caller's (``lent``: a
    segment a worker reads and removes); several videos' rows are copied out."""
    for i, a in enumerate(admitted):
        if a.cached is None and a.key is not None:
            whole = len(admitted) == 1 and not lent
            if not whole and not cache.admits(out[starts[i]:starts[i + 1]].nbytes):
                continue  # too large to keep: not copied
            rows = out if whole else out[starts[i]:starts[i + 1]].copy()
            cache.put(a.key, CachedVideo(a.plan, rows, {k: v.copy() for k, v in aux[i].items()}, a.rotation))


def _timed(frames: Iterable[np.ndarray], a: AdmittedVideo[Any, Any]) -> Iterator[np.ndarray]:
    """The frames, the time spent producing them added to ``a.decode_ms``."""
    it = iter(frames)
    while True:
        t = time.perf_counter()
        try:
            frame = next(it)
        except StopIteration:
            a.decode_ms += (time.perf_counter() - t) * 1e3
            return
        a.decode_ms += (time.perf_counter() - t) * 1e3
        yield frame


def results(admitted: Sequence[AdmittedVideo[Any, Any]], laid: AppliedLayout, family: Family) -> list[VideoResult]:
    """Each video's facts, its ranges from ``laid`` (the videos' view of the layout)."""
    ranges, runs = laid.structural_ranges, laid.patch_ranges
    return [
        VideoResult(
            hash=a.hash, height=a.plan.meta.height, width=a.plan.meta.width,
            resized_height=a.plan.resized_size[0], resized_width=a.plan.resized_size[1],
            encoded_bytes=len(a.data), token_count=ranges[i][1], structural_range=ranges[i], patch_ranges=runs[i],
            cached=a.cached is not None, grid=tuple(int(v) for v in a.plan.grid), fps=a.plan.meta.fps,
            total_frames=a.plan.meta.total_num_frames, duration_s=a.plan.meta.duration_s,
            frame_indices=a.plan.indices, timestamps_s=a.plan.timestamps, second_per_grid=a.plan.second_per_grid,
            options=_effective(a.target), rotation=a.rotation or a.plan.meta.rotation,
        )
        for i, a in enumerate(admitted)
    ]


def _effective(t: VideoTarget[VC]) -> VideoOptions:
    """The values the video was sampled and resized with."""
    c = t.config
    sampling = c.do_sample_frames
    return VideoOptions(
        fps=c.fps if sampling and c.num_frames is None else None, num_frames=c.num_frames if sampling else None,
        min_frames=c.min_frames, max_frames=c.max_frames, min_pixels=c.min_pixels, max_pixels=c.max_pixels,
        max_tokens=t.options.max_tokens,
    )


def items(family: Family, admitted: Sequence[AdmittedVideo[Any, Any]], ranges: Sequence[tuple[int, int]]
          ) -> list[RopeSpan]:
    """Every video's M-RoPE items at its place in the expanded ids."""
    video = video_family(family)
    return [item for a, (offset, _) in zip(admitted, ranges) for item in video.video_items(offset, a.plan)]
