"""One sidecar job: its media fetched under the service's policy, preprocessed into the
tensors vLLM's own processor gives that engine, answered as the reference sidecar
answers (``smg_grpc_servicer/vllm/mm_sidecar.py``: ``Sidecar.handle``).

A job carries the worker's unexpanded prompt (one placeholder per item) and the items'
URLs. The result carries the expanded prompt, each item's placeholder range, vLLM's
cache key of each item and each item's ``MultiModalKwargsItem`` bytes. Every failure is
one of the protocol's codes: the client's (``CLIENT_ERROR_CODES``: the worker answers
INVALID_ARGUMENT) or a retryable one (the router tries another worker).
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from smg_grpc_servicer.mm_sidecar_protocol import (
    SCHEMA_VERSION,
    Fingerprint,
    Job,
    JobResult,
    Placeholder,
    Timing,
    failure,
)
from smg_grpc_servicer.vllm.media_refs import parse_scheme_list, url_scheme

from .. import config as model_config
from ..core.carriers import ImageOptions, VideoOptions, VideoResult
from ..core.errors import Code, PreprocessError
from ..families import Family
from ..media import MediaFetcher
from ..media.fetch import Item
from ..media import video as media_video
from ..media.decode import open_image
from ..pipeline.driver import Preprocessor
from . import vllm_audio, vllm_hashes, vllm_image, vllm_items, vllm_video

#: What each served family's image items hold in vLLM (``vllm_image.IMAGE_FIELDS``).
IMAGE_FIELDS = vllm_image.IMAGE_FIELDS


#: The engine's processor kwargs (``--mm-processor-kwargs``) the sidecar reproduces, and the
#: families it reproduces them for. vLLM 0.33.0 merges the engine's flat kwargs with the
#: request's (vllm/config/multimodal.py:711-735, ``merge_mm_processor_kwargs``) and routes each
#: to every HF kwarg scope that takes it (vllm/multimodal/processing/context.py:376-400,
#: ``get_merged_mm_kwargs``; 502-515): min_pixels and max_pixels reach both the image and the
#: video processor, whose torchvision classes (transformers 5.24, Qwen2-VL, Qwen2.5-VL and
#: Qwen3-VL) make them ``size.shortest_edge`` / ``size.longest_edge``
#: (models/qwen2_vl/image_processing_qwen2_vl.py:121-141, video_processing_qwen2_vl.py:148-168;
#: Qwen3-VL's video processor resizes by that size, video_processing_qwen3_vl.py:357); a bound
#: not given keeps that processor's own. They are no hash factor: ``get_mm_hashes`` takes its
#: factors from the request's kwargs only (vllm/multimodal/processing/inputs.py:34-110; the
#: worker's jobs carry none: vllm/renderers/base.py:966-1003). Checked against vLLM's own
#: ``apply`` (scripts/gen_vllm_fixtures.py, MANIFEST.json "engine_kwargs").
PIXEL_KWARGS = ("min_pixels", "max_pixels")
#: The Omni thinkers pass the flat kwargs to their HF processor unrouted (``call_hf_processor``,
#: context.py:402-413, merges them without ``supported_mm_processor_kwargs``), which gives each
#: to every modality declaring it (transformers 5.24 processing_utils.py:1755, ``_merge_kwargs``):
#: the image and video processors (Qwen2-VL's) take them as above; for a job with a video, vLLM
#: replaces the processor's ``videos_kwargs`` size (the bounds of an engine without kwargs)
#: with the video processor's own, from preprocessor_config.json, under the engine's bounds
#: (model_executor/models/qwen2_5_omni_thinker.py:591-605, Qwen3-Omni's by inheritance), so a
#: video bound not given is the checkpoint's, as an image's is. The audio extractor takes none.
PIXEL_KWARGS_FAMILIES = ("qwen_vl", *vllm_video.OMNI)


@dataclass(frozen=True)
class Engine:
    """What the sidecar processes for: the worker's fingerprint, whether its engine
    normalizes pixels on the device (raw uint8 then), the URL schemes it fetches, and
    the model's family (its processors' default pixel bounds, for the engine's kwargs)."""

    fingerprint: Fingerprint
    raw: bool
    schemes: str
    family: Family | None = None
    #: each job's image and video options: the engine's pixel bounds (None: none given)
    options: tuple[ImageOptions | None, VideoOptions | None] = field(init=False, default=(None, None))

    def __post_init__(self) -> None:
        """Its dtype is one vLLM runs in (the floating tensors are cast to it); its media
        kwargs (sampling, decoders) change its videos and hashes: refused; its processor
        kwargs: min_pixels / max_pixels for the Qwen-VL and Omni families only (``pixel_options``)."""
        vllm_items.check_engine_dtype(self.fingerprint.dtype)
        value = self.fingerprint.media_io_kwargs
        if json.loads(value or "{}"):
            raise ValueError(f"the engine's media_io_kwargs ({value}) change its processing; this sidecar "
                             "reproduces the engine's defaults only (media_io_kwargs {})")
        object.__setattr__(self, "options", pixel_options(self.fingerprint.mm_processor_kwargs, self.family))

    def over_limit(self, modalities: list[str]) -> str:
        """What a job's items exceed of the engine's per-prompt limits (the fingerprint's
        ``limit_per_prompt``: "*" for a modality not named), or ""."""
        limits = json.loads(self.fingerprint.limit_per_prompt or "{}")
        for modality in sorted(set(modalities)):
            entry = limits.get(modality, limits.get("*"))
            count = modalities.count(modality)
            if isinstance(entry, dict) and isinstance(entry.get("count"), int) and count > entry["count"]:
                return (f"the job carries {count} {modality} items, above the engine's limit of {entry['count']} "
                        "(--limit-mm-per-prompt)")
        return ""


def pixel_options(kwargs: str, family: Family | None) -> tuple[ImageOptions | None, VideoOptions | None]:
    """Each job's image and video options for the engine's ``mm_processor_kwargs`` (the
    fingerprint's JSON): none for {}; for a Qwen-VL family or an Omni thinker, both bounds of
    both processors, each the engine's or that processor's own (``_bounds``; an Omni video's:
    the checkpoint's, ``vllm_video.OMNI``). ValueError naming what is refused and why: vLLM
    would process with kwargs the sidecar does not reproduce."""
    given = json.loads(kwargs or "{}")
    if not given:
        return None, None
    name = getattr(family, "name", None)
    if family is None or not isinstance(given, dict) or name not in PIXEL_KWARGS_FAMILIES:
        raise ValueError(f"the engine's mm_processor_kwargs ({kwargs}): this sidecar reproduces them only as "
                         f"min_pixels / max_pixels for the Qwen-VL families (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) and the "
                         f"Omni thinkers (Qwen2.5-Omni, Qwen3-Omni), not for {name or 'this engine'}; start the worker "
                         "without them")
    for key, value in given.items():
        if isinstance(value, dict):
            raise ValueError(f"the engine's mm_processor_kwargs {key!r} ({json.dumps(value)}) is a scoped form: vLLM "
                             "hands it to that one HF processor, over any flat key; this sidecar reproduces only the "
                             f"flat {' and '.join(PIXEL_KWARGS)}, which vLLM routes to the image and video processors")
        if key not in PIXEL_KWARGS:
            raise ValueError(f"the engine's mm_processor_kwargs {key!r} ({json.dumps(value)}) is not reproduced: this "
                             f"sidecar reproduces {' and '.join(PIXEL_KWARGS)} only (vLLM passes every key to the HF "
                             "processor, whose pixels or tokens it may change)")
        if value is None:
            raise ValueError(f"the engine's mm_processor_kwargs {key!r} is null: vLLM 0.33.0 passes None to the HF "
                             f"processor, whose strict field check refuses it ('{key}' expected int), so that engine "
                             "fails every request with media; leave the key out for the processor's default")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"the engine's mm_processor_kwargs {key!r} ({json.dumps(value)}) is not a positive "
                             "integer, which is all this sidecar reproduces of it")
    (lo, hi), video = _bounds(given, family.config, "image"), family.config.video
    if name in vllm_video.OMNI and video is not None:  # the video processor's own bounds (above)
        video = family.config
    if video is None:
        return ImageOptions(min_pixels=lo, max_pixels=hi), None
    lo_v, hi_v = _bounds(given, video, "video")
    return ImageOptions(min_pixels=lo, max_pixels=hi), VideoOptions(min_pixels=lo_v, max_pixels=hi_v)


def _bounds(given: dict, config: Any, modality: str) -> tuple[int, int]:
    """The (min, max) pixels a processor resizes with: the engine's kwargs over the
    processor's own (``config``). HF's smart_resize does not check min <= max: where they
    cross it scales an image up past max_pixels, where the service lowers min_pixels to
    max_pixels (families/qwen/image.py ``configured``): ValueError."""
    lo, hi = given.get("min_pixels", config.min_pixels), given.get("max_pixels", config.max_pixels)
    if lo > hi:
        whose = {k: "the engine's" if k in given else f"the {modality} processor's default" for k in PIXEL_KWARGS}
        raise ValueError(f"the engine's mm_processor_kwargs {json.dumps(given, sort_keys=True)} leave the {modality} "
                         f"processor min_pixels {lo} ({whose['min_pixels']}) above max_pixels {hi} "
                         f"({whose['max_pixels']}): HF's smart_resize does not check min <= max and would scale "
                         "an image past max_pixels, which this sidecar does not reproduce; give bounds with "
                         f"min_pixels <= max_pixels")
    return lo, hi


class JobRunner:
    """Turns jobs into results; the pixel work runs in ``executor``."""

    def __init__(self, model: Preprocessor, fetcher: MediaFetcher, engine: Engine, executor: Executor):
        check_served(model)
        self.model = model
        self.fetcher = fetcher
        self.engine = engine
        self.executor = executor
        self.accepted = parse_scheme_list(engine.schemes)
        family = model.family
        self.modalities = tuple(m for m, takes in (("image", "image" in family.modalities),
                                                   ("video", vllm_video.takes_video(family)),
                                                   ("audio", vllm_audio.takes_audio(family))) if takes)

    async def handle(self, job: Job) -> JobResult:
        started = time.time()
        now_ms = int(started * 1000)
        if now_ms > job.deadline_ms:
            return failure(job.job_id, "expired", "job deadline passed before processing")
        mismatches = self.engine.fingerprint.mismatches(job.fingerprint)
        if mismatches:
            return failure(job.job_id, "fingerprint_mismatch", ",".join(mismatches))
        over = self.engine.over_limit([item.modality for item in job.items])
        if over:
            return failure(job.job_id, "limit_exceeded", over)
        for index, item in enumerate(job.items):
            scheme = url_scheme(item.url)
            if scheme not in self.accepted:
                return failure(job.job_id, "scheme_not_accepted",
                               f"item {index}: scheme '{scheme or 'none'}' not in {self.engine.schemes}")
            if item.modality not in self.modalities:
                return failure(job.job_id, "fetch_failed", f"item {index}: unsupported media modality "
                               f"{item.modality!r} (this sidecar processes {' and '.join(self.modalities)})")
        caps = {"video": ("video_max_bytes", self.model.video_limits.max_bytes),
                "audio": ("audio_max_bytes", self.model.audio_limits.max_bytes)}
        counts = {"image": 0, "video": 0, "audio": 0}
        kinds = []
        for item in job.items:  # each item numbered within its modality, under its modality's byte cap
            kinds.append(Item(item.modality, counts[item.modality], caps.get(item.modality)))
            counts[item.modality] += 1
        try:
            data = await self.fetcher.fetch_all([item.url for item in job.items],
                                                deadline=time.monotonic() + max(0.0, job.deadline_ms / 1000 - started),
                                                items=kinds)
        except PreprocessError as e:
            return failure(job.job_id, _fetch_code(e), e.message)
        fetched = time.time()
        try:  # pixels, keys and encoding in the pool: the event loop keeps the hello fresh
            result = await asyncio.get_running_loop().run_in_executor(self.executor, self._processed, job, data)
        except PreprocessError as e:
            return failure(job.job_id, _process_code(e), e.message)
        result.timing = Timing(queue_ms=max(0, now_ms - job.enqueued_ms), fetch_ms=int((fetched - started) * 1000),
                               process_ms=int((time.time() - fetched) * 1000))
        return result

    def _processed(self, job: Job, data: list[bytes]) -> JobResult:
        """The job's result from its fetched bytes (each modality's items in prompt order)."""
        images, videos, audios = ([raw for raw, item in zip(data, job.items) if item.modality == m]
                                  for m in ("image", "video", "audio"))
        family = self.model.family.name
        prompt = vllm_audio.service_prompt(family, vllm_image.service_prompt(family, job.prompt_token_ids,
                                                                             len(images)), len(audios))
        image_options, video_options = self.engine.options
        out = self.model.preprocess(images, prompt, videos=videos, audios=audios, raw=self.engine.raw, use_cache=False,
                                    options=image_options, video_options=video_options)
        hashes, placeholders, kwargs = {}, {}, {}
        dtype = self.engine.fingerprint.dtype
        if images:
            items = vllm_items.split_items(vllm_image.image_batch(out, family, dtype), IMAGE_FIELDS[family](out))
            hashes["image"] = [self._hash(raw, i) for i, raw in enumerate(images)]
            placeholders["image"] = [_placeholder(vllm_image.vllm_span(family, im.structural_range), im.patch_ranges)
                                     for im in out.images]
            kwargs["image"] = [vllm_items.encode_item(item) for item in items]
        if videos:
            items = vllm_items.split_items(vllm_items.cast_floats(vllm_video.video_batch(out, family), dtype),
                                           vllm_video.VIDEO_FIELDS[family](out))
            hashes["video"] = [self._video_hash(raw, v, i) for i, (raw, v) in enumerate(zip(videos, out.videos))]
            placeholders["video"] = [_placeholder(v.structural_range, v.patch_ranges) for v in out.videos]
            kwargs["video"] = [vllm_items.encode_item(item) for item in items]
        if audios:
            batch = vllm_items.cast_floats(vllm_audio.audio_batch(out, self.model.family), dtype)
            items = vllm_items.split_items(batch, vllm_audio.AUDIO_FIELDS[family](out))
            hashes["audio"] = [vllm_hashes.audio_hash(wave, self.engine.fingerprint.model) for wave in out.audio_waves]
            placeholders["audio"] = [_placeholder(vllm_audio.vllm_span(family, a.structural_range), a.patch_ranges)
                                     for a in out.audios]
            kwargs["audio"] = [vllm_items.encode_item(item) for item in items]
        return JobResult(
            v=SCHEMA_VERSION, job_id=job.job_id, ok=True, fingerprint=self.engine.fingerprint,
            prompt_token_ids=[int(t) for t in out.input_ids],
            mm_hashes=hashes, mm_placeholders=placeholders, mm_kwargs=kwargs,
        )

    def _video_hash(self, raw: bytes, video: VideoResult, item: int) -> str:
        """vLLM's key of the video as its loader gives it: the encoded bytes, or the sampled
        frames when they are smaller, with the loader's metadata."""
        frames = None
        if vllm_video.frames_bytes(video) < len(raw):
            meta = media_video.probe(raw, self.model.video_limits, item)
            frames = np.stack(list(media_video.frames(raw, video.frame_indices, meta, self.model.video_limits, item)))
        return vllm_hashes.video_hash(raw, self.engine.fingerprint.model, vllm_video.metadata(video), frames=frames)

    def _hash(self, raw: bytes, item: int) -> str:
        """vLLM's key of the image as its connector loads it: converted to RGB (with the
        conversion in the key) unless it is RGB already. Its pixels are the service's: vLLM's
        conversion (``convert_image_mode``: transparency composited onto white) is HF's."""
        mode = open_image(raw, item=item).image.mode
        io_config = None if mode == "RGB" else {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)}
        return vllm_hashes.image_hash(raw, self.engine.fingerprint.model, io_config=io_config)


def _placeholder(span: tuple[int, int], patches: tuple[tuple[int, int], ...]) -> Placeholder:
    """vLLM's PlaceholderRange of an item's replacement: ``is_embed`` only where some of
    its tokens are not embeddings."""
    offset, length = span
    if patches == ((offset, length),):
        return Placeholder(offset=offset, length=length)
    embed = [False] * length
    for start, count in patches:
        embed[start - offset:start - offset + count] = [True] * count
    return Placeholder(offset=offset, length=length, is_embed=embed)


def _fetch_code(e: PreprocessError) -> str:
    """A fetch failure's protocol code."""
    if getattr(e, "reason", None) == "domain_not_allowed":
        return "domain_not_allowed"
    if e.code is Code.RESOURCE_EXHAUSTED:
        return "limit_exceeded"
    return "fetch_failed"


def _process_code(e: PreprocessError) -> str:
    """A preprocessing failure's protocol code: the request's token ids (no item named),
    an image that cannot be decoded, a limit, or the service's own failure."""
    if e.code is Code.INVALID_ARGUMENT:
        return "decode_failed" if e.item is not None else "placeholder_mismatch"
    if e.code is Code.RESOURCE_EXHAUSTED:
        return "limit_exceeded"
    return "processor_error"


def load_model(model: str, processor: str, **options) -> Preprocessor:
    """The checkpoint's preprocessing as the worker's vLLM runs it: ``processor`` (the HF
    class vLLM loads), images resized where vLLM's processor resizes them first (Inkling:
    ``vllm_image.processor_family``), videos sampled as vLLM's loader samples them;
    ``options`` go to the ``Preprocessor`` (limits). Clips are decoded whole: vLLM keys a
    clip by its whole parsed waveform (``vllm_hashes.audio_hash``)."""
    loaded = model_config.load(model, None, processor)
    family = vllm_image.processor_family(vllm_video.loader_family(loaded.family))
    return Preprocessor(family, name=loaded.name, source=loaded.source, cache_bytes=0, whole_clips=True, **options)


def engine_for(model: Preprocessor, fingerprint: Fingerprint, schemes: str,
               device_normalize: bool | None = None) -> Engine:
    """The engine ``model``'s sidecar serves: raw pixels as vLLM 0.33 decides
    (``mm_device_do_normalize``: on where the model class supports it) unless
    ``device_normalize`` says; ValueError for a family not served, raw pixels nothing
    would normalize, or engine kwargs not reproduced (``Engine``)."""
    check_served(model)
    supported = model.family.device_normalization() is not None
    raw = supported if device_normalize is None else device_normalize
    if raw and not supported:
        raise ValueError(f"--mm-device-do-normalize: vLLM's model for {model.name} ({model.family.name}) does "
                         "not normalize pixels on the device, so raw pixels would never be normalized")
    return Engine(fingerprint, raw=raw, schemes=schemes, family=model.family)


def check_served(model: Preprocessor) -> None:
    """ValueError unless the sidecar knows what vLLM builds for the model's family (why
    not: ``vllm_image.REFUSED``)."""
    vllm_image.check_served(model.family, vllm_audio.AUDIO_FIELDS)
    vllm_audio.check_ids(model.family)


def fingerprint_from(mapping: Mapping[str, str]) -> Fingerprint:
    """The operator's fingerprint (the JSON object the hello carries): every field named."""
    missing = [name for name in Fingerprint.__struct_fields__ if name not in mapping]
    if missing:
        raise ValueError(f"the fingerprint misses {', '.join(missing)} (give all of "
                         f"{', '.join(Fingerprint.__struct_fields__)}, as the worker's hello carries them)")
    return Fingerprint(**{name: str(mapping[name]) for name in Fingerprint.__struct_fields__})
