"""The service's protobuf messages to and from the pipeline's carriers.

Requests' image, video and audio options become ``ImageOptions`` / ``VideoOptions`` /
``AudioOptions`` (an unknown
detail value is INVALID_ARGUMENT); a Preprocess's or Plan's output, the served models and
a counters ``Snapshot`` become their responses. No I/O, no state.
"""

from __future__ import annotations

from typing import Iterable

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.carriers import (AudioOptions, AudioResult, ImageOptions, ImageResult, PlanOutput, PreprocessOutput,
                             VideoOptions, VideoResult)
from ..core.errors import Code, PreprocessError
from ..pipeline.metrics import BUCKETS_MS, Snapshot
from ..wire import assemble as asm
from ..wire import tensors

_DETAILS = {pb.DETAIL_UNSPECIFIED: None, pb.DETAIL_AUTO: "auto", pb.DETAIL_LOW: "low", pb.DETAIL_HIGH: "high"}
_DETAIL_VALUES = {"auto": pb.DETAIL_AUTO, "low": pb.DETAIL_LOW, "high": pb.DETAIL_HIGH}


def image_options(request: pb.PreprocessRequest) -> tuple[ImageOptions | None, list | None]:
    """(the request's image_options, each image's own options or None), or (None, None)."""
    options = _options(request.image_options, "image_options", None) if request.HasField("image_options") else None
    per_image = [_options(item.options, "options", i) if item.HasField("options") else None
                 for i, item in enumerate(request.images)]
    return options, per_image if any(o is not None for o in per_image) else None


def _options(msg: pb.ImageOptions, where: str, item: int | None) -> ImageOptions:
    if msg.detail not in _DETAILS:
        raise PreprocessError(Code.INVALID_ARGUMENT, f"{where}.detail: unknown value {msg.detail} (DETAIL_AUTO, "
                              "DETAIL_LOW or DETAIL_HIGH)", item=item)
    return ImageOptions(
        min_pixels=msg.min_pixels if msg.HasField("min_pixels") else None,
        max_pixels=msg.max_pixels if msg.HasField("max_pixels") else None,
        max_tokens=msg.max_tokens if msg.HasField("max_tokens") else None,
        detail=_DETAILS[msg.detail],
    )


_VIDEO_FIELDS = ("fps", "num_frames", "min_frames", "max_frames", "min_pixels", "max_pixels", "max_tokens")


def video_options(request: pb.PreprocessRequest) -> tuple[VideoOptions | None, list | None]:
    """(the request's video_options, each video's own or None), or (None, None)."""
    def read(msg: pb.VideoOptions) -> VideoOptions:
        return VideoOptions(**{f: getattr(msg, f) for f in _VIDEO_FIELDS if msg.HasField(f)})

    options = read(request.video_options) if request.HasField("video_options") else None
    per_video = [read(v.video_options) if v.HasField("video_options") else None for v in request.videos]
    return options, per_video if any(o is not None for o in per_video) else None


def audio_options(request: pb.PreprocessRequest) -> tuple[AudioOptions | None, list | None]:
    """(the request's audio_options, each clip's own or None), or (None, None);
    INVALID_ARGUMENT for a max_seconds that is not a positive number."""
    def read(msg: pb.AudioOptions, item: int | None) -> AudioOptions:
        if not msg.HasField("max_seconds"):
            return AudioOptions()
        if not msg.max_seconds > 0 or msg.max_seconds == float("inf"):
            raise PreprocessError(Code.INVALID_ARGUMENT, f"audio_options.max_seconds must be a positive number of "
                                  f"seconds, got {msg.max_seconds}", item=item, kind="audio")
        return AudioOptions(max_seconds=msg.max_seconds)

    options = read(request.audio_options, None) if request.HasField("audio_options") else None
    per_audio = [read(a.audio_options, i) if a.HasField("audio_options") else None
                 for i, a in enumerate(request.audios)]
    return options, per_audio if any(o is not None for o in per_audio) else None


def _fill_options(msg: pb.ImageOptions, options: ImageOptions) -> None:
    for name in ("min_pixels", "max_pixels", "max_tokens"):
        value = getattr(options, name)
        if value is not None:
            setattr(msg, name, value)
    if options.detail is not None:
        msg.detail = _DETAIL_VALUES[options.detail]


def preprocess_response(request: pb.PreprocessRequest, out: PreprocessOutput) -> pb.PreprocessResponse:
    """Everything a PreprocessResponse says about the request, without a payload."""
    resp = pb.PreprocessResponse(
        request_id=request.request_id,
        input_ids=asm.token_ids(out.input_ids),
        image_token_id=out.image_token_id,
    )
    for im in out.images:
        _fill_image_info(resp.images.add(), im)
    for v in out.videos:
        _fill_video_info(resp.videos.add(), v)
    if out.video_token_id is not None:
        resp.video_token_id = out.video_token_id
    for a in out.audios:
        _fill_audio_info(resp.audios.add(), a)
    if out.audio_token_id is not None:
        resp.audio_token_id = out.audio_token_id
    if out.positions is not None:
        tensors.fill(resp.mrope.positions, out.positions)
        resp.mrope.delta = int(out.rope_delta or 0)
    t = out.timings_ms
    resp.timings.decode_ms = float(t.get("decode_ms", 0.0))
    resp.timings.process_ms = float(t.get("process_ms", 0.0))
    return resp


def plan_response(request: pb.PreprocessRequest, out: PlanOutput, info: dict) -> pb.PlanResponse:
    """Everything a PlanResponse says but its timings (``info``: the model's)."""
    resp = pb.PlanResponse(request_id=request.request_id, input_ids_length=out.input_ids_length,
                           image_token_id=out.image_token_id)
    for im in out.images:
        _fill_image_info(resp.images.add(), im)
    for v in out.videos:
        _fill_video_info(resp.videos.add(), v)
    for dtype, nbytes in out.pixel_bytes.items():
        resp.pixel_bytes[dtype] = nbytes
    if out.videos:
        resp.video_token_id = info["video_token_id"] or 0
    for a in out.audios:
        _fill_audio_info(resp.audios.add(), a)
    if out.audios:
        resp.audio_token_id = info["audio_token_id"] or 0
    return resp


def _fill_image_info(info: pb.ImageInfo, im: ImageResult) -> None:
    info.hash = im.hash
    info.token_count = im.token_count
    info.height, info.width = im.height, im.width
    info.resized_height, info.resized_width = im.resized_height, im.resized_width
    info.encoded_bytes = im.encoded_bytes
    info.cached = im.cached
    info.structural_range.offset, info.structural_range.length = im.structural_range
    for offset, length in im.patch_ranges:
        info.patch_ranges.add(offset=offset, length=length)
    info.grid.extend(im.grid)
    if im.options is not None:
        _fill_options(info.options, im.options)


def _fill_video_info(info: pb.VideoInfo, v: VideoResult) -> None:
    info.hash, info.token_count, info.encoded_bytes, info.cached = v.hash, v.token_count, v.encoded_bytes, v.cached
    info.height, info.width = v.height, v.width
    info.resized_height, info.resized_width = v.resized_height, v.resized_width
    info.structural_range.offset, info.structural_range.length = v.structural_range
    for offset, length in v.patch_ranges:
        info.patch_ranges.add(offset=offset, length=length)
    info.grid.extend(v.grid)
    info.fps, info.total_frames, info.duration_s = float(v.fps), int(v.total_frames), float(v.duration_s)
    info.frame_indices.extend(int(i) for i in v.frame_indices)
    info.timestamps_s.extend(float(t) for t in v.timestamps_s)
    if v.second_per_grid is not None:
        info.second_per_grid = float(v.second_per_grid)
    if v.options is not None:
        for name, value in v.options.as_dict().items():
            setattr(info.options, name, value)


def _fill_audio_info(info: pb.AudioInfo, a: AudioResult) -> None:
    info.hash, info.token_count, info.encoded_bytes, info.cached = a.hash, a.token_count, a.encoded_bytes, a.cached
    info.structural_range.offset, info.structural_range.length = a.structural_range
    for offset, length in a.patch_ranges:
        info.patch_ranges.add(offset=offset, length=length)
    info.sample_rate, info.channels = a.sample_rate, a.channels
    info.duration_s, info.samples, info.frames = float(a.duration_s), a.samples, a.frames
    if a.options is not None and a.options.max_seconds is not None:
        info.options.max_seconds = a.options.max_seconds


def models_response(infos: Iterable[dict]) -> pb.ListModelsResponse:
    return pb.ListModelsResponse(models=[_model_info(info) for info in infos])


def _model_info(info: dict) -> pb.ModelInfo:
    return pb.ModelInfo(
        name=info["name"],
        family=info["family"],
        source=info["source"],
        modalities=info["modalities"],
        image_token_id=info["image_token_id"],
        token_ids=info["token_ids"],
        reference_processor=info["reference_processor"],
        mrope=info["mrope"],
        max_images_per_request=info["max_images_per_request"],
        placeholder_token_id=info["placeholder_token_id"],
        max_image_tokens=info["max_image_tokens"],
        video_token_id=info.get("video_token_id") or 0,
        audio_token_id=info.get("audio_token_id") or 0,
        max_audios_per_request=info.get("max_audios_per_request") or 0,
        max_audio_tokens=info.get("max_audio_tokens") or 0,
    )


def stats_response(s: Snapshot) -> pb.GetStatsResponse:
    resp = pb.GetStatsResponse(
        uptime_s=s.uptime_s,
        in_flight=s.in_flight,
        max_in_flight=s.max_in_flight,
        rejected_busy=s.rejected_busy,
        requests=s.requests,
        statuses=[pb.StatusCount(method=m, code=c, count=n) for (m, c), n in sorted(s.statuses.items())],
        images=s.images,
        image_bytes=s.image_bytes,
        work=pb.WorkStats(busy=max(0, s.work_busy), image_steps=s.image_steps, image_steps_skipped=s.image_steps_skipped,
                          images_decoded=s.images_decoded),
    )
    f = s.fetch or {}
    resp.fetch.CopyFrom(
        pb.FetchStats(
            started=f.get("fetches_started", 0),
            failed=f.get("fetches_failed", 0),
            bytes_fetched=f.get("bytes_fetched", 0),
            in_flight=f.get("in_flight", 0),
            refusals=f.get("refusals", {}),
        )
    )
    if s.cache is not None:
        c = s.cache
        resp.cache.CopyFrom(
            pb.CacheStats(
                hits=c.hits, misses=c.misses, evictions=c.evictions, items=c.items,
                bytes=c.bytes, max_bytes=c.max_bytes, too_large=c.too_large, peak_bytes=c.peak_bytes,
            )
        )
    if s.store is not None:
        st = s.store
        resp.store.CopyFrom(
            pb.StoreStats(
                items=st.items, bytes=st.bytes, max_items=st.max_items, max_bytes=st.max_bytes,
                evicted=st.evicted, expired=st.expired, peak_bytes=st.peak_bytes,
            )
        )
    if s.media is not None:
        m = s.media
        resp.media.CopyFrom(
            pb.MediaStoreStats(
                items=m.items, bytes=m.bytes, max_bytes=m.max_bytes, hits=m.hits, misses=m.misses, stored=m.stored,
                evictions=m.evictions, bound_ids=m.bound_ids, peak_bytes=m.peak_bytes,
                remote_hits=m.remote_hits, remote_misses=m.remote_misses, remote_errors=m.remote_errors,
                remote_invalid=m.remote_invalid, remote_written=m.remote_written, remote_dropped=m.remote_dropped,
            )
        )
    for stage, h in s.stages.items():
        resp.stages.add(stage=stage, count=h.count, sum_ms=h.sum_ms, upper_bounds_ms=BUCKETS_MS, bucket_counts=h.counts)
    v = s.video
    resp.video.CopyFrom(pb.VideoStats(videos=v.videos, video_bytes=v.video_bytes, frames=v.frames, planned=v.planned,
                                      refusals=v.refusals, cached=v.cached))
    for stage, h in v.stages.items():
        resp.video.stages.add(stage=stage, count=h.count, sum_ms=h.sum_ms, upper_bounds_ms=BUCKETS_MS,
                              bucket_counts=h.counts)
    return resp
