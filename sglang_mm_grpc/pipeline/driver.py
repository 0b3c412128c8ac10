"""The request driver: owns the steps and their failure semantics.

    check the request -> configure each image (the family variant its options ask for)
    -> admit each image (hash; cached, or opened, planned from its header, checked
    against the token budget, then decoded)
    -> lay out the tokens (from the plans, before any pixel work)
    -> allocate pixel_values once -> process each image into its slot -> positions

``plan`` runs the same steps up to the layout from the headers alone (nothing decoded).
Any failure rejects the whole request with one PreprocessError; there is no partial result.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from .. import config as model_config
from . import audio_driver, video_driver
from .cache import CachedItem, PreprocessCache
from ..core.carriers import (AudioOptions, DecodedImage, ImageOptions, ImageResult, PlanOutput, PreprocessOutput,
                             VideoOptions)
from ..core.errors import Code, PreprocessError, invalid
from ..families import Family, FieldLayout, ItemPlan
from ..families.base import Aux
from ..families.batching import Slot, Slots
from ..families.video import VideoPlan
from .fanout import fan_out
from ..core.hashing import content_hash
from ..kernels.wirecast import WIDTHS
from ..core.layout import AppliedLayout, apply_groups, find_placeholders
from ..media.decode import DEFAULT_FORMATS, DEFAULT_MAX_PIXELS, ImageHeader, decode_pixels, open_image
from ..media.samples import random_png
from ..media.audio import AudioLimits
from ..media.video import VideoLimits
from .metrics import WorkCounters

DEFAULT_CACHE_BYTES = 1 << 30
#: Images in one request, unless configured otherwise.
DEFAULT_MAX_IMAGES = 64
#: Tokens one image may expand into, unless configured otherwise. A 4032x3024 photo
#: (12 MP, a phone camera's) fits every preset: the most it takes is 15552 (Qwen2-VL,
#: whose presets cannot exceed 16384 = max_pixels / 28**2); Inkling, which never
#: downscales, gets 7676 for it and is refused from about 16 MP up.
DEFAULT_MAX_IMAGE_TOKENS = 16384
#: Token ids in one request, as sent and as expanded: 1 Mi ids (4 MiB of uint32), above
#: the longest context any preset's model serves (Qwen2.5-VL's 1M with YaRN; Llama 4
#: Scout's 10M is not served that long in practice) and its images' expansion. A request
#: over it is refused from its length alone.
DEFAULT_MAX_INPUT_IDS = 1 << 20

R = TypeVar("R")
#: ``check_size(expanded ids, pixel elements)``: the caller's bound (see ``Preprocessor.preprocess``).
CheckSize = Callable[[int, int], None]
#: The layout of a request: the whole, its image-only view, each video's range and runs.
@dataclass(frozen=True)
class Layout:
    """The request's ids laid out: the whole, and each modality's view (its ranges)."""

    applied: AppliedLayout
    images: AppliedLayout
    videos: AppliedLayout
    audios: AppliedLayout


@dataclass(frozen=True)
class Prompt:
    """A request's token ids, checked: one placeholder per image, at ``placeholders``, and
    one video placeholder per video, at ``video_placeholders``."""

    ids: np.ndarray  # int64, as given
    placeholders: np.ndarray  # int64 positions, ascending
    video_placeholders: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    audio_placeholders: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass(frozen=True)
class Target:
    """What one image is preprocessed by: the family variant its options configured, that
    variant's spec (its cache key), the options asked and the token budget it is held to."""

    family: Family[Any, Any]
    spec_key: str  # its cache key: the variant's fingerprint (and the caller's scope, when scoped)
    options: ImageOptions | None
    budget: tuple[int, str]  # (tokens, what set it)
    encoder_budget: int = 0  # the most feature tokens (the worker's mm_encoder_budget); 0: none


@dataclass
class _Admitted:
    """One image after admission: its plan, and either its opened header (decoded only
    once the whole request's plans passed their checks) or its cached result."""

    hash: str
    height: int
    width: int
    plan: ItemPlan[Any]
    header: ImageHeader | None  # None on a cache hit
    cached: CachedItem | None
    target: Target
    decode_ms: float = 0.0
    process_ms: float = 0.0
    item: int = 0  # its index in the request


class Preprocessor:
    """One model's preprocessing: bytes + token ids in, the HF processor's tensors out."""

    #: What loading the model found that its operator should know (``config.LoadedModel``).
    notes: tuple[str, ...] = ()

    def __init__(
        self,
        family: Family,
        *,
        name: str,
        source: str,
        max_images: int = DEFAULT_MAX_IMAGES,
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        max_image_tokens: int = DEFAULT_MAX_IMAGE_TOKENS,
        formats: frozenset[str] = DEFAULT_FORMATS,
        executor: Executor | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache: PreprocessCache | None = None,
        max_videos: int = video_driver.DEFAULT_MAX_VIDEOS,
        max_video_tokens: int = video_driver.DEFAULT_MAX_VIDEO_TOKENS,
        video_limits: VideoLimits = VideoLimits(),
        max_input_ids: int = DEFAULT_MAX_INPUT_IDS,
        max_audios: int = audio_driver.DEFAULT_MAX_AUDIOS,
        max_audio_tokens: int = audio_driver.DEFAULT_MAX_AUDIO_TOKENS,
        audio_limits: AudioLimits = AudioLimits(),
        whole_clips: bool = False,
    ):
        """``executor``: where a request's other images run (``fanout``); None runs them in
        turn on the calling thread. ``cache``: share one cache between models (keys include
        the model spec); otherwise the model gets its own of ``cache_bytes`` (0: none).
        ``max_image_tokens``: the most tokens one image may expand into (its whole
        expansion); a request may lower it, never raise it. ``max_videos``,
        ``max_video_tokens`` (a video's whole expansion; ``VideoOptions.max_tokens`` may
        lower it) and ``video_limits`` (bytes, duration, frames, pixels, decode time) bound
        the videos (``video_driver``); ``max_audios``, ``max_audio_tokens`` and
        ``audio_limits`` the audio clips (``audio_driver``), each decoded only as far as
        the family reads it unless ``whole_clips`` (the output's ``audio_waves`` are then
        the whole clips: the vLLM sidecar keys a clip by it)."""
        if max_image_tokens < 1:
            raise ValueError(f"max_image_tokens must be positive, got {max_image_tokens}")
        self.family = family
        self.name = name
        self.source = source
        self.max_images = max_images
        self.max_image_pixels = max_image_pixels
        self.max_image_tokens = int(max_image_tokens)
        self.formats = formats
        self.max_videos = max_videos
        self.max_input_ids = int(max_input_ids)
        self.max_video_tokens = int(max_video_tokens)
        self.video_limits = video_limits
        self.max_audios = max_audios
        self.max_audio_tokens = int(max_audio_tokens)
        self.audio_limits = audio_limits
        self.whole_clips = whole_clips
        self.executor = executor
        #: Everything that decides the output for given bytes; part of every cache key.
        self.spec_key = family.fingerprint()
        self.cache = cache if cache is not None else (PreprocessCache(cache_bytes) if cache_bytes > 0 else None)
        #: Per-image steps run, and skipped because the request was cancelled.
        self.work = WorkCounters()

    @classmethod
    def from_model(cls, model: str, *, name: str | None = None, processor: str | None = None,
                   **options) -> "Preprocessor":
        """A preset id, model directory or ``NAME=DIR``, optionally ``@pil``/``@torchvision``
        (see ``config.load``); ``options`` go to the constructor."""
        loaded = model_config.load(model, name, processor)
        pp = cls(loaded.family, name=loaded.name, source=loaded.source, **options)
        pp.notes = loaded.notes
        return pp

    @property
    def field_layout(self) -> FieldLayout:
        return self.family.field_layout

    @property
    def info(self) -> dict:
        f = self.family
        return {
            "name": self.name,
            "family": f.name,
            "source": self.source,
            "modalities": list(f.modalities),
            "image_token_id": f.image_token_id,
            "placeholder_token_id": f.placeholder_token_id,
            "token_ids": f.token_ids(),
            "reference_processor": f.reference_processor,
            "mrope": f.uses_mrope,
            "max_images_per_request": self.max_images,
            "max_image_tokens": self.max_image_tokens,
            "video_token_id": f.video_token_id,
            "max_videos_per_request": self.max_videos,
            "max_video_tokens": self.max_video_tokens,
            "audio_token_id": getattr(f, "audio_token_id", None) if "audio" in f.modalities else None,
            "max_audios_per_request": self.max_audios,
            "max_audio_tokens": self.max_audio_tokens,
        }

    def warmup(self) -> None:
        """Compile every kernel this model's requests can reach, so none pays for it.

        The family warms its kernels (and its raw variant's, where it has one); then whole
        requests run through decode (so the arrays have exactly the types requests bring)
        at sizes that take the resize paths (both passes, one axis, none, several images
        in one batch), past the cache.
        """
        raw = (False, True) if self.family.device_normalization() is not None else (False,)
        for r in raw:
            (self.family.raw() if r else self.family).warmup()
        audio_driver.warmup(self.family)
        if "image" not in self.family.modalities:
            return
        sizes = [(37, 53), (300, 40), (40, 300)]
        sizes.append(self.family.plan(64, 64, 0).resized_size)  # already at target size
        images = [random_png(h, w, seed) for seed, (h, w) in enumerate(sizes)]
        for batch in ([images[0]], [images[-1]], images):
            for r in raw:
                try:
                    self.preprocess(batch, use_cache=False, raw=r)
                except PreprocessError:
                    pass  # a family may refuse a warmup shape; its kernels are compiled anyway

    # -- the request ------------------------------------------------------------------

    def check_request(self, images: int, input_ids=None, videos: int = 0, audios: int = 0) -> Prompt:
        """The request's shape, checked before any fetch or pixel work: image, video and
        audio counts within ``max_images`` / ``max_videos`` / ``max_audios``, a model (and
        PyAV) that takes video / audio when there are some, and exactly one placeholder per
        item (``input_ids`` None: just the placeholders, the images', the videos', the clips')."""
        if images == 0 and videos == 0 and audios == 0:
            raise invalid("the request has no images, videos or audio clips")
        if images > self.max_images:
            raise PreprocessError(
                Code.RESOURCE_EXHAUSTED, f"{images} images in one request, over the limit of {self.max_images} (max_images)"
            )
        if videos > self.max_videos:
            raise PreprocessError(
                Code.RESOURCE_EXHAUSTED, f"{videos} videos in one request, over the limit of {self.max_videos} (max_videos)")
        if audios > self.max_audios:
            raise PreprocessError(Code.RESOURCE_EXHAUSTED, f"{audios} audio clips in one request, over the limit of "
                                  f"{self.max_audios} (max_audios)")
        if images and "image" not in self.family.modalities:
            raise PreprocessError(Code.FAILED_PRECONDITION, f"the {self.family.name} family takes no images "
                                  f"({images} image(s) in the request)")
        video_driver.check_family(self.family, videos)
        audio_driver.check_family(self.family, audios)
        if input_ids is not None:
            self.check_ids_length(len(input_ids))
        placeholder = self.family.placeholder_token_id
        if input_ids is None:
            ids = np.full(images + videos + audios, placeholder, dtype=np.int64)
            ids[images:images + videos] = video_driver.video_token(self.family) if videos else placeholder
            ids[images + videos:] = audio_driver.audio_family(self.family).audio_token_id if audios else placeholder
        else:
            ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
        # a family without images looks for no image placeholder (its image token is never used)
        image_at = find_placeholders(ids, placeholder, images) if "image" in self.family.modalities else np.zeros(0, np.int64)
        return Prompt(ids, image_at,
                      video_driver.video_placeholders(self.family, ids, videos),
                      audio_driver.audio_placeholders(self.family, ids, audios))

    def check_ids_length(self, n: int, expanded: bool = False) -> None:
        """RESOURCE_EXHAUSTED for ``n`` token ids over ``max_input_ids`` (as sent, or as
        the plans expand them): from the length alone, before anything else."""
        if n > self.max_input_ids:
            what = "the expanded input_ids would hold" if expanded else "input_ids holds"
            raise PreprocessError(Code.RESOURCE_EXHAUSTED, f"{what} {n} token ids, over the limit of "
                                  f"{self.max_input_ids} (serve --max-input-ids)")

    def token_budget(self, max_image_tokens: int | None = None) -> tuple[int, str]:
        """(the budget per image, what set it): a request's ``max_image_tokens`` (None or
        0: none) below the model's, else the model's."""
        if max_image_tokens and max_image_tokens < self.max_image_tokens:
            return int(max_image_tokens), "the request's max_image_tokens"
        return self.max_image_tokens, "the model's max_image_tokens"

    def configure(self, images: int, options: ImageOptions | None = None,
                  image_options: Sequence[ImageOptions | None] | None = None,
                  max_image_tokens: int | None = None, raw: bool = False, encoder_budget: int = 0,
                  scope: str = "") -> list[Target]:
        """Each image's target: the request's ``options`` overridden field by field by the
        image's own (``image_options[i]``, None: none), the family variant they configure
        (``Family.with_options``; INVALID_ARGUMENT naming the image, the field and why
        when the family cannot honour them exactly; ``raw``: of the family's raw variant,
        FAILED_PRECONDITION where it has none) and the token budget (the lower of
        ``token_budget`` and the image's ``max_tokens``). Cheap: variants are kept.
        ``scope``: the caller the cache entries are kept for (``_scoped``)."""
        if image_options is not None and len(image_options) != images:
            raise invalid(f"{len(image_options)} per-image options for {images} image(s)")
        base = options if options is not None else ImageOptions()
        budget = self.token_budget(max_image_tokens)
        model = self.family.raw() if raw else self.family
        targets = []
        for i in range(images):
            merged = base.merged(image_options[i] if image_options is not None else None)
            try:
                family = model.with_options(merged)
            except PreprocessError as e:
                raise PreprocessError(e.code, e.detail, item=i) from None
            limit = budget
            if merged.max_tokens is not None and merged.max_tokens < budget[0]:
                limit = (merged.max_tokens, "the image's max_tokens option")
            spec = _scoped(scope, self.spec_key if family is self.family else family.fingerprint())
            targets.append(Target(family, spec, merged if merged != ImageOptions() else None, limit, encoder_budget))
        return targets

    def preprocess(
        self, images: Sequence[bytes], input_ids=None, *, cancel: threading.Event | None = None,
        use_cache: bool = True, max_image_tokens: int | None = None, allocate: video_driver.Allocate | None = None,
        options: ImageOptions | None = None, image_options: Sequence[ImageOptions | None] | None = None,
        hashes: Sequence[str | None] | None = None, videos: Sequence[bytes] = (),
        video_options: VideoOptions | None = None, per_video_options: Sequence[VideoOptions | None] | None = None,
        video_hashes: Sequence[str | None] | None = None, deadline: float | None = None, raw: bool = False,
        encoder_budget: int = 0, scope: str = "", check_size: CheckSize | None = None, audios: Sequence[bytes] = (),
        audio_options: AudioOptions | None = None, per_audio_options: Sequence[AudioOptions | None] | None = None,
        audio_hashes: Sequence[str | None] | None = None,
    ) -> PreprocessOutput:
        """``cancel``: set it (RPC cancelled, deadline passed) and the request stops at the next
        image boundary with CANCELLED. ``use_cache`` False: no cache read or write.
        ``max_image_tokens``: this request's budget per image (None or 0: the model's, never
        above it), RESOURCE_EXHAUSTED before decoding. ``allocate(shape, name, dtype)``: memory
        of the caller's for pixel_values / pixel_values_videos (e.g. a shared-memory segment
        the kernels write into), or None. ``options`` / ``image_options[i]``: what the request
        / image i asks (``configure``); each image says its effective values. ``hashes[i]``: image i's blake3 when known. ``videos``
        (``video_driver``) and ``audios`` (``audio_driver``), with their options and hashes
        as for images; ``deadline``: a ``time.monotonic()`` decoding must end by. ``raw``: uint8
        pixels before rescale and normalize (for an engine normalizing on the device). The most
        feature tokens per item: ``encoder_budget`` (0: none). ``scope``: whose cache entries it
        may hit. ``check_size(expanded ids, pixel elements)``: the caller's bound, checked first."""
        t0 = time.perf_counter()
        images, videos, audios = _encoded(images), _encoded(videos, "video"), _encoded(audios, "audio clip")
        prompt = self.check_request(len(images), input_ids, len(videos), len(audios))
        family = self.family.raw() if raw else self.family
        targets = self.configure(len(images), options, image_options, max_image_tokens, raw, encoder_budget, scope)
        vtargets = video_driver.configure(family, len(videos), self.max_video_tokens, video_options,
                                          per_video_options, encoder_budget)
        cache = self.cache if use_cache else None
        admitted, vadmitted = self._admit_all(images, videos, targets, vtargets, (hashes, video_hashes), cache, scope,
                                              cancel)
        aadmitted = self._admit_audios(audios, audio_options, per_audio_options, audio_hashes, deadline, cancel,
                                       cache, scope)
        t1 = time.perf_counter()
        plans = [a.plan for a in admitted]
        self._check_size(prompt, plans, [v.plan for v in vadmitted], check_size, aadmitted)
        laid = self._layout(prompt, plans, vadmitted, aadmitted)
        pixel_values, slots, lent = self._allocate(admitted, allocate, family.pixel_dtype)
        aux = self._each(lambda i: self._process(admitted[i], pixel_values, slots[i], cache, lent), len(images),
                         cancel)
        pixel_values_videos, video_tensors = video_driver.process(
            family, vadmitted, self.video_limits, deadline, partial(self._each, cancel=cancel), cache, allocate)
        audio = audio_driver.output(self.family, aadmitted, laid.audios, audios, cache)
        t2 = time.perf_counter()
        positions = self._positions(laid, plans, vadmitted, aadmitted)
        out = PreprocessOutput(
            input_ids=laid.applied.input_ids, original_input_ids=prompt.ids, pixel_values=pixel_values,
            tensors=self.family.batch_tensors(aux), images=_image_results(images, admitted, laid.images),
            image_token_id=self.family.image_token_id,
            positions=positions.positions if positions is not None else None,
            rope_delta=positions.delta if positions is not None else None,
            raw_images=[bytes(b) if not isinstance(b, bytes) else b for b in images],
            videos=video_driver.results(vadmitted, laid.videos, self.family),
            pixel_values_videos=pixel_values_videos, video_tensors=video_tensors,
            video_token_id=self.family.video_token_id if videos else None,
            raw_videos=[bytes(b) for b in videos], **audio,
        )
        return _timed(out, admitted, vadmitted, (t0, t1, t2, time.perf_counter()), aadmitted)

    def plan(
        self, images: Sequence[bytes], input_ids=None, *, cancel: threading.Event | None = None,
        use_cache: bool = True, max_image_tokens: int | None = None, options: ImageOptions | None = None,
        image_options: Sequence[ImageOptions | None] | None = None, hashes: Sequence[str | None] | None = None,
        videos: Sequence[bytes] = (), video_options: VideoOptions | None = None,
        per_video_options: Sequence[VideoOptions | None] | None = None,
        video_hashes: Sequence[str | None] | None = None, encoder_budget: int = 0, scope: str = "",
        check_size: CheckSize | None = None, audios: Sequence[bytes] = (), audio_options: AudioOptions | None = None,
        per_audio_options: Sequence[AudioOptions | None] | None = None, audio_hashes: Sequence[str | None] | None = None,
    ) -> PlanOutput:
        """What ``preprocess`` with the same arguments will produce, from the image headers
        alone: per image its hash, sizes, grid, token count, ranges, effective options and
        whether the preprocessing cache holds it (its plan is then the cached one; the
        cache is only looked at, never counted or refreshed), and the expanded ids' length.
        No pixel is decoded and nothing is kept. The same failures as ``preprocess`` up to
        its layout (an image over its token budget is refused); a file whose pixel data
        is corrupt is found only when it is decoded. Videos likewise, from their container
        headers: sampling, sizes, grid and expansion (no frame decoded). ``pixel_bytes``: the
        pixel tensors' size in each wire dtype the model can send. Audio clips from their
        headers too: the sample count there, exact where the header's is (``AudioMeta.exact``)."""
        t0 = time.perf_counter()
        images, videos, audios = _encoded(images), _encoded(videos, "video"), _encoded(audios, "audio clip")
        prompt = self.check_request(len(images), input_ids, len(videos), len(audios))
        targets = self.configure(len(images), options, image_options, max_image_tokens, encoder_budget=encoder_budget,
                                 scope=scope)
        vtargets = video_driver.configure(self.family, len(videos), self.max_video_tokens, video_options,
                                          per_video_options, encoder_budget)
        cache = self.cache if use_cache else None
        planned, vplanned = self._admit_all(images, videos, targets, vtargets, (hashes, video_hashes), cache, scope,
                                            cancel, peek=True)
        aplanned = self._admit_audios(audios, audio_options, per_audio_options, audio_hashes, None, cancel, cache,
                                      scope, header_only=True)
        self._check_size(prompt, [a.plan for a in planned], [v.plan for v in vplanned], check_size, aplanned)
        laid = self._layout(prompt, [a.plan for a in planned], vplanned, aplanned)
        return PlanOutput(
            images=_image_results(images, planned, laid.images),
            input_ids_length=len(laid.applied.input_ids),
            image_token_id=self.family.image_token_id,
            timings_ms={"total_ms": (time.perf_counter() - t0) * 1e3},
            videos=video_driver.results(vplanned, laid.videos, self.family),
            audios=audio_driver.results(self.family, aplanned, laid.audios),
            pixel_bytes=self._pixel_bytes([a.plan for a in planned], [v.plan for v in vplanned]),
        )

    def _admit_all(self, images: list, videos: list, targets: list[Target],
                   vtargets: list[video_driver.VideoTarget[Any]], known: tuple, cache: PreprocessCache | None,
                   scope: str, cancel: threading.Event | None, peek: bool = False
                   ) -> tuple[list[_Admitted], list[video_driver.AdmittedVideo[Any, Any]]]:
        """Every image and video admitted (``_admit``, ``video_driver.admit``); ``known``:
        (image hashes, video hashes) the caller knows; ``peek``: a Plan's look at the cache."""
        hashes, video_hashes = known
        admitted = self._each(lambda i: self._admit(images[i], i, cache, targets[i], _known(hashes, i), peek),
                              len(images), cancel)
        vadmitted = self._each(lambda i: video_driver.admit(self.family, videos[i], i, vtargets[i], self.video_limits,
                                                            _known(video_hashes, i), cache,
                                                            _scoped(scope, self.spec_key), peek=peek),
                               len(videos), cancel)
        return admitted, vadmitted

    def _check_size(self, prompt: Prompt, plans: list[ItemPlan[Any]], video_plans: Sequence[VideoPlan],
                    check: CheckSize | None, audios: Sequence[audio_driver.AdmittedAudio[Any]] = ()) -> None:
        """The expanded length (``check_ids_length``) and ``check`` (see ``preprocess``)."""
        expanded = len(prompt.ids) - len(plans) - len(video_plans) - len(audios)
        expanded += sum(len(p.expansion) for p in plans) + sum(len(v.expansion) for v in video_plans)
        expanded += sum(a.plan.token_count for a in audios)
        self.check_ids_length(expanded, expanded=True)
        if check is not None:
            check(expanded, self._pixel_elements(plans, video_plans))

    def _pixel_elements(self, plans: list[ItemPlan[Any]], video_plans: Sequence[VideoPlan]) -> int:
        """Elements of pixel_values and pixel_values_videos the plans make."""
        elements = int(np.prod(self.family.batch_shape(plans)[0], dtype=np.int64)) if plans else 0
        return elements + sum(int(np.prod(p.feature_shape, dtype=np.int64)) for p in video_plans)

    def _pixel_bytes(self, plans: list[ItemPlan[Any]], video_plans: Sequence[VideoPlan]) -> dict[str, int]:
        """The pixel tensors' bytes in each wire dtype (uint8 where the model has raw pixels)."""
        elements = self._pixel_elements(plans, video_plans)
        raw = self.family.device_normalization() is not None
        return {dtype: elements * width for dtype, width in WIDTHS.items() if raw or dtype != "uint8"}

    def _layout(self, prompt: Prompt, plans: list[ItemPlan[Any]], videos: Sequence[video_driver.AdmittedVideo[Any, Any]],
                audios: Sequence[audio_driver.AdmittedAudio[Any]]) -> Layout:
        """Every item expanded at its placeholder in one walk, and each modality's ranges."""
        applied, views = apply_groups(prompt.ids, [
            (prompt.placeholders, [p.expansion for p in plans]),
            (prompt.video_placeholders, [v.plan.expansion for v in videos]),
            (prompt.audio_placeholders, [a.plan.expansion for a in audios])])
        return Layout(applied, *views)

    def _positions(self, laid: Layout, plans: list[ItemPlan[Any]],
                   videos: Sequence[video_driver.AdmittedVideo[Any, Any]], audios: Sequence[Any]):
        """The family's rotary positions (None where it has none), over the images' view of
        the layout. Audio tokens take text positions (the Omni thinkers' ``get_rope_index``)."""
        if videos:
            items = video_driver.items(self.family, videos, laid.videos.structural_ranges)
            return self.family.positions(laid.images, plans, items)
        return self.family.positions(laid.images, plans)

    def _admit_audios(self, audios: list, options: AudioOptions | None,
                      per_audio: Sequence[AudioOptions | None] | None, hashes: Sequence[str | None] | None,
                      deadline: float | None, cancel: threading.Event | None, cache: PreprocessCache | None,
                      scope: str, header_only: bool = False) -> list[audio_driver.AdmittedAudio[Any]]:
        """Every clip from the cache, or decoded, resampled and planned (``header_only``:
        planned from its header)."""
        targets = audio_driver.configure(self.family, len(audios), self.max_audio_tokens, options, per_audio)
        spec = _scoped(scope, self.spec_key)
        if header_only:
            return self._each(lambda i: audio_driver.plan_only(self.family, audios[i], i, targets[i], self.audio_limits,
                                                               _known(hashes, i), cache, spec), len(audios), cancel)
        return self._each(lambda i: audio_driver.admit(self.family, audios[i], i, targets[i], self.audio_limits,
                                                       _known(hashes, i), deadline, cache, spec, self.whole_clips),
                          len(audios), cancel)

    def _each(self, fn: Callable[[int], R], count: int, cancel: threading.Event | None) -> list[R]:
        return fan_out(fn, count, self.executor, cancel, self.work)

    def _admit(self, data: bytes, i: int, cache: PreprocessCache | None, target: Target,
               known: str | None = None, peek: bool = False) -> _Admitted:
        """Hash (unless ``known``); a cached result, or the image opened and planned from its
        header, held to the token budgets (it is decoded in ``_process``, once every image
        of the request passed). ``peek``: look at the cache without counting or
        refreshing it (a Plan)."""
        h = known or content_hash(data)
        if cache is not None:
            key = (h, target.spec_key)
            hit = cache.peek(key) if peek else cache.get(key)
            if isinstance(hit, CachedItem):
                _within(hit.plan, hit.height, hit.width, i, target.budget, encoder_budget=target.encoder_budget)
                return _Admitted(h, hit.height, hit.width, hit.plan, None, hit, target, item=i)
        header = open_image(data, item=i, max_pixels=self.max_image_pixels, formats=self.formats)
        plan = _within(target.family.plan(header.height, header.width, i), header.height, header.width, i,
                       target.budget, encoder_budget=target.encoder_budget)
        return _Admitted(h, header.height, header.width, plan, header, None, target, item=i)


    def _allocate(self, admitted: list[_Admitted], allocate: video_driver.Allocate | None = None,
                  dtype: np.dtype[Any] = np.dtype(np.float32)) -> tuple[np.ndarray, Slots, bool]:
        """pixel_values of ``dtype``, each item's slot, and whether the memory is the
        caller's (``allocate``); a lone cached image is its cached tensor (no copy)."""
        if not admitted:  # a request of videos alone
            return np.zeros((0, 0), dtype), [], False
        if len(admitted) == 1 and admitted[0].cached is not None:
            return admitted[0].cached.pixel_values, [admitted[0].cached.slot], False
        shape, slots = self.family.batch_shape([a.plan for a in admitted])
        lent = allocate(shape, "pixel_values", dtype) if allocate is not None else None
        if lent is not None:
            if _padded(shape, slots):
                lent.fill(0)
            return lent, slots, True
        return _new_batch(shape, slots, dtype), slots, False

    def _process(self, a: _Admitted, pixel_values: np.ndarray, slot: Slot, cache: PreprocessCache | None,
                 lent: bool = False) -> Aux:
        """Write the image's slot (from its pixels or the cache); return its aux rows."""
        tp = time.perf_counter()
        if a.cached is not None:
            if pixel_values is not a.cached.pixel_values:
                pixel_values[slot] = a.cached.pixel_values[a.cached.slot]
            aux = a.cached.aux
        else:
            aux = a.target.family.process_item(self._decode(a), a.plan, pixel_values[slot])
            entry = self._cache_entry(a, aux, pixel_values, slot, cache, lent) if cache is not None else None
            if cache is not None and entry is not None:
                cache.put(_key(a), entry)
        a.process_ms = (time.perf_counter() - tp) * 1e3 - a.decode_ms
        return aux

    def _decode(self, a: _Admitted) -> DecodedImage:
        """The admitted image's pixels (Pillow's decode; the header is let go)."""
        td = time.perf_counter()
        header, a.header = a.header, None
        if header is None:  # a cached image is never decoded
            raise PreprocessError(Code.INTERNAL, "the image was decoded twice", item=a.item)
        img = decode_pixels(header, transparency=a.target.family.transparency)
        if (img.height, img.width) != (a.height, a.width):  # never seen: open_image reads the orientation
            raise PreprocessError(Code.INVALID_ARGUMENT, f"decoded {img.width}x{img.height}, but its header says "
                                  f"{a.width}x{a.height}", item=a.item)
        a.decode_ms = (time.perf_counter() - td) * 1e3
        self.work.add(decoded=1)
        return img

    def _cache_entry(self, a: _Admitted, aux: Aux, pixel_values: np.ndarray, slot: Slot, cache: PreprocessCache,
                     lent: bool = False) -> CachedItem | None:
        """The item as a single-image batch: the request's own arrays when it is the only
        image (no copy), else (or when the memory is the caller's) a copy of its slot into
        a fresh single-image batch; None when that copy is too large for the cache to keep,
        or when the memory is the caller's and the image missed for the first time (see
        ``cache``: a one-off image staged in shared memory pays no copy)."""
        if lent and not cache.missed_before(_key(a)):
            return None
        shape, (single_slot,) = self.family.batch_shape([a.plan])
        if lent or pixel_values.shape != shape or slot != single_slot:
            if not cache.admits(int(np.prod(shape)) * pixel_values.itemsize):
                return None
            batch = _new_batch(shape, [single_slot], pixel_values.dtype)
            batch[single_slot] = pixel_values[slot]
            pixel_values, slot = batch, single_slot
        return CachedItem(a.height, a.width, a.plan, pixel_values, slot, aux)


def _key(a: _Admitted) -> tuple[str, str]:
    """The admitted image's cache key."""
    return a.hash, a.target.spec_key


def _within(plan: ItemPlan[Any], height: int, width: int, item: int, budget: tuple[int, str],
            decoded: bool = False, encoder_budget: int = 0) -> ItemPlan[Any]:
    """``plan``, or RESOURCE_EXHAUSTED when it expands into more tokens than the budget, or
    carries more feature tokens than the worker's encoder budget."""
    if encoder_budget and plan.expansion.features > encoder_budget:
        raise PreprocessError(
            Code.RESOURCE_EXHAUSTED,
            f"{width}x{height} image carries {plan.expansion.features} feature tokens, over the worker's encoder "
            f"budget of {encoder_budget} per item (its server info's mm_encoder_budget: the engine could never "
            f"schedule it){'' if decoded else '; not decoded'}. Ask for fewer pixels (max_pixels or max_tokens)",
            item=item,
        )
    limit, source = budget
    if plan.token_count > limit:
        raise PreprocessError(
            Code.RESOURCE_EXHAUSTED,
            f"{width}x{height} image expands into {plan.token_count} tokens, over the budget of {limit} "
            f"tokens per image ({source}){'' if decoded else '; not decoded'}",
            item=item,
        )
    return plan


def _scoped(scope: str, spec_key: str) -> str:
    """A cache key's spec part for ``scope``: entries of one caller are never another's hit."""
    return f"{scope}\x00{spec_key}" if scope else spec_key


def _known(hashes: Sequence[str | None] | None, i: int) -> str | None:
    return hashes[i] if hashes is not None and i < len(hashes) else None


def _timed(out: PreprocessOutput, admitted: list[_Admitted], videos: list[video_driver.AdmittedVideo[Any, Any]],
           marks: tuple[float, float, float, float], audios: Sequence[audio_driver.AdmittedAudio[Any]] = ()
           ) -> PreprocessOutput:
    """``out`` with the request's stage timings and each item's."""
    t0, t1, t2, t3 = marks
    out.timings_ms = {
        "decode_ms": sum(a.decode_ms for a in admitted) + sum(v.decode_ms for v in videos),
        "admit_ms": (t1 - t0) * 1e3,
        "process_ms": max(0.0, (t2 - t1) * 1e3 - sum(a.decode_ms for a in admitted)),  # decodes run in it
        "layout_ms": (t3 - t2) * 1e3,
        "total_ms": (t3 - t0) * 1e3,
    }
    out.item_timings_ms = [{"decode_ms": a.decode_ms, "process_ms": a.process_ms, "cached": a.cached is not None}
                           for a in admitted]
    if videos:
        out.timings_ms["video_decode_ms"] = sum(v.decode_ms for v in videos)
        out.timings_ms["video_process_ms"] = sum(v.process_ms for v in videos)
    if audios:
        out.timings_ms["audio_decode_ms"] = sum(a.timings_ms.get("decode", 0.0) for a in audios)
        out.timings_ms["audio_resample_ms"] = sum(a.timings_ms.get("resample", 0.0) for a in audios)
    return out


def _encoded(images, kind: str = "image") -> list:
    """The images (or videos) as encoded bytes: bytes-like objects as they are, a
    ``pathlib.Path`` read from disk; anything else (a str above all: a file name, or a
    URL only the server fetches) is refused naming the item."""
    if isinstance(images, (bytes, bytearray, memoryview, str, Path)):
        raise invalid(f"{kind}s is one {kind}, not a list of {kind}s: pass [{kind}]")
    out = []
    for i, image in enumerate(images):
        if isinstance(image, (bytes, bytearray, memoryview)):
            out.append(image)
        elif isinstance(image, Path):
            try:
                out.append(image.read_bytes())
            except OSError as e:
                raise PreprocessError(Code.INVALID_ARGUMENT, f"cannot read {image}: {e.strerror}", item=i,
                                      kind=kind) from None
        else:
            shown = f"{type(image).__name__} {image!r:.80}"
            raise PreprocessError(Code.INVALID_ARGUMENT, f"got a {shown}: pass the encoded bytes, or a pathlib.Path "
                                  "to read (URLs are fetched by the server, not by Preprocessor)", item=i, kind=kind)
    return out


def _image_results(images, admitted: list[_Admitted], applied: AppliedLayout) -> list[ImageResult]:
    return [
        ImageResult(
            hash=a.hash,
            height=a.height,
            width=a.width,
            resized_height=a.plan.resized_size[0],
            resized_width=a.plan.resized_size[1],
            encoded_bytes=len(images[i]),
            token_count=applied.structural_ranges[i][1],
            structural_range=applied.structural_ranges[i],
            patch_ranges=applied.patch_ranges[i],
            cached=a.cached is not None,
            grid=a.target.family.grid(a.plan),
            options=a.target.family.effective_options(a.target.options),
        )
        for i, a in enumerate(admitted)
    ]


def _new_batch(shape: tuple[int, ...], slots: Slots, dtype: np.dtype[Any] = np.dtype(np.float32)) -> np.ndarray:
    """pixel_values to write the items' slots into, starting on a cache line, so rows
    the kernels write with streaming stores cover whole lines. Zeros where padding is
    left between slots (which never overlap); a batch the slots cover whole (one image,
    or a family without padding) is not written twice."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + _LINE, dtype=np.uint8)
    start = -raw.ctypes.data % _LINE
    out = raw[start:start + nbytes].view(dtype).reshape(shape)
    if _padded(shape, slots):
        out.fill(0)
    return out


_LINE = 64


def _padded(shape: tuple[int, ...], slots: Slots) -> bool:
    """Whether the slots leave padding in a batch of ``shape``."""
    whole = np.broadcast_to(np.zeros((), np.bool_), shape)  # sizes only, no memory
    return sum(whole[slot].size for slot in slots) != whole.size
