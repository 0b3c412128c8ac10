"""What every family provides. Families describe data; the driver owns the flow.

A family answers, for one image: what it becomes from its size alone (``plan``: the
resized size, its block of pixel_values, a typed geometry and the tokens it expands
into), and then its pixels (``process_item`` writes the block and returns the item's rows
of model-specific tensors). It may compute rotary positions from the plans. It never
fetches, never touches gRPC and never sees other requests.

Everything the driver, the config layer and the servicer use is declared here: a family
implements the abstract methods (its constructor from its config, ``plan``,
``process_item``), overrides what differs and nothing is probed with getattr. A family
that takes videos also implements the video side (``video.VideoFamily``).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Generic, Sequence, TypeVar

import numpy as np

from ..core.carriers import DETAILS, DecodedImage, FieldLayout, ImageOptions
from ..core.errors import Code, PreprocessError, invalid
from ..core.layout import AppliedLayout, Expansion
from ..core.positions import MRope, RopeSpan
from . import batching
from .batching import Slots
from .hf_keys import ConfigError

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

#: The transformers image-processor classes a family can reproduce: "pil" (the
#: ``...ImageProcessorPil`` classes) or "torchvision" (the torch-backed ones).
PROCESSORS = ("pil", "torchvision")

#: An item's rows of the model-specific tensors, by HF name (concatenated over the
#: request's images on dim 0 unless the family batches them otherwise).
Aux = dict[str, np.ndarray]

#: A family's resolved config: a frozen dataclass (its repr is the family's fingerprint).
C = TypeVar("C")
#: The geometry an item's plan carries: the family's own typed value (grid, tiles, crops, ...).
G = TypeVar("G")
#: A ``Normalization`` (sub)class: ``as_raw`` keeps its type.
N = TypeVar("N", bound="Normalization")

#: Option variants one family instance keeps (``Family.with_options``); the least
#: recently used goes first, so requests cannot grow them without bound.
MAX_VARIANTS = 64
_variants_lock = threading.Lock()


def check_options(options: ImageOptions) -> None:
    """What no family accepts: a size or budget that is not positive, an unknown
    ``detail``, or ``min_pixels`` above ``max_pixels`` (INVALID_ARGUMENT naming the field)."""
    for name in ("min_pixels", "max_pixels", "max_tokens"):
        value = getattr(options, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise invalid(f"{name} must be a positive integer, got {value!r}")
    if options.detail is not None and options.detail not in DETAILS:
        raise invalid(f"detail must be one of {', '.join(DETAILS)}, got {options.detail!r}")
    if options.min_pixels is not None and options.max_pixels is not None and options.min_pixels > options.max_pixels:
        raise invalid(f"min_pixels {options.min_pixels} is above max_pixels {options.max_pixels}")


@dataclass(frozen=True)
class Normalization:
    """The rescale + normalize knobs (``hf_keys.normalization`` reads them), as a base of
    the families' config dataclasses."""

    image_mean: tuple[float, ...] = CLIP_MEAN
    image_std: tuple[float, ...] = CLIP_STD
    rescale_factor: float = 1 / 255
    do_rescale: bool = True
    do_normalize: bool = True
    #: Raw pixels: uint8 after resize, pad and patchify, neither rescaled nor normalized
    #: (the processor called with do_rescale=False, do_normalize=False), for an engine
    #: that normalizes on the device.
    raw: bool = False

    def lut(self, make: Callable[..., np.ndarray]) -> np.ndarray:
        """The normalize table these knobs give, made by ``make`` (a ``kernels`` table maker)."""
        return make(self.image_mean, self.image_std, self.rescale_factor, self.do_rescale, self.do_normalize)

    def as_raw(self: N) -> N:
        """These knobs with the pixels kept raw."""
        return replace(self, raw=True, do_rescale=False, do_normalize=False)

    @property
    def pixel_dtype(self) -> np.dtype[Any]:
        """What the kernels write: uint8 raw pixels, else float32."""
        return np.dtype(np.uint8 if self.raw else np.float32)


@dataclass(frozen=True)
class ItemPlan(Generic[G]):
    """What an image will become, known from its size alone (before any pixel work)."""

    resized_size: tuple[int, int]  # (height, width) the model sees
    feature_shape: tuple[int, ...]  # this item's block of pixel_values
    geometry: G  # the family's own typed value (grid, tiles, crops, ...)
    expansion: Expansion  # the tokens its placeholder becomes

    @property
    def token_count(self) -> int:
        return len(self.expansion)


class Family(ABC, Generic[C, G]):
    """Base class: subclasses set the class attributes and implement the abstract methods
    (``__init__`` from the config, ``plan``, ``process_item``); the other methods have
    defaults that fit most families. ``C``: the config type; ``G``: the plans' geometry."""

    name: ClassVar[str]
    reference_processor: str
    modalities: ClassVar[tuple[str, ...]] = ("image",)
    uses_mrope: ClassVar[bool] = False
    #: The transformers classes this family reproduces, its default first.
    processors: ClassVar[tuple[str, ...]] = ("pil",)
    #: How decoding flattens an image with transparency for this family (one of
    #: ``media.decode.TRANSPARENCY``): "white", transformers' ``convert_to_rgb``; or
    #: "keep", RGBA pixels (``DecodedImage.alpha``) that ``process_item`` flattens.
    transparency: ClassVar[str] = "white"

    config: C  # the family's resolved, frozen config dataclass
    image_token_id: int  # the token that carries features
    field_layout: FieldLayout
    #: Families with "video" in ``modalities`` (``video.VideoFamily``): the video keys' vLLM
    #: layout and the video token; None for the others (the servicer reads them of any family).
    video_field_layout: FieldLayout | None = None
    video_token_id: int | None = None

    @abstractmethod
    def __init__(self, config: C) -> None:
        """The family serving a checkpoint, from its resolved config alone (``config_from_hf``)."""

    @abstractmethod
    def plan(self, height: int, width: int, item: int) -> ItemPlan[G]:
        """What an image of ``height`` x ``width`` becomes (``item``: its index in the
        request, named by the INVALID_ARGUMENT an unusable size raises)."""

    @abstractmethod
    def process_item(self, image: DecodedImage, plan: ItemPlan[G], out: np.ndarray) -> Aux:
        """Write the item's features into ``out`` (its slot of pixel_values), every element
        of it (the slot is not zeroed beforehand); return its rows of the other tensors."""

    def batch_shape(self, plans: Sequence[ItemPlan[G]]) -> tuple[tuple[int, ...], Slots]:
        """pixel_values' shape and each item's slot in it, from the request's plans (a
        ``batching`` layout; by default the items' rows one after another on dim 0)."""
        return batching.concat_rows(plans)

    @property
    def pixel_dtype(self) -> np.dtype[Any]:
        """The dtype of pixel_values (and pixel_values_videos): float32, or uint8 for a
        ``raw`` variant."""
        return np.dtype(np.float32)

    def device_normalization(self) -> str | None:
        """The vLLM model code that rescales and normalizes this checkpoint's pixels on
        the device (``supports_mm_device_do_normalize``), cited; None where the engine
        wants them normalized, so raw pixels would never be."""
        return None

    def raw(self) -> "Family[C, G]":
        """This family writing raw uint8 pixels (built from its config's ``as_raw``, once, and
        kept), for an engine that normalizes on the device; FAILED_PRECONDITION naming the
        family and why where no engine would normalize them."""
        if self.pixel_dtype == np.uint8:
            return self
        if self.device_normalization() is None:
            raise PreprocessError(
                Code.FAILED_PRECONDITION,
                f"the {self.name} family ({self.reference_processor}) has no raw uint8 pixels to send: vLLM's model "
                "for this checkpoint does not normalize pixels on the device (it does not set "
                "supports_mm_device_do_normalize), so nothing would ever rescale or normalize them; ask for "
                "float pixels (WIRE_DTYPE_FLOAT32, BFLOAT16 or FLOAT16)")
        with _variants_lock:
            variant = self.__dict__.get("_raw")
        if variant is None:
            variant = type(self)(self.raw_config())
            with _variants_lock:
                variant = self.__dict__.setdefault("_raw", variant)
        return variant

    def raw_config(self) -> C:
        """The config of the raw variant (``raw``): its ``Normalization.as_raw``, the knobs
        of a family whose model normalizes on the device."""
        config = self.config
        if not isinstance(config, Normalization):
            raise PreprocessError(Code.INTERNAL, f"the {self.name} family's config has no raw form")
        return config.as_raw()

    def with_processor(self, processor: str) -> "Family[C, G]":
        """This checkpoint reproducing another transformers class (one of ``processors``)."""
        if processor not in self.processors:
            raise ConfigError(
                f"the {self.name} family has no {processor!r} processor (it offers {', '.join(self.processors)})")
        return self

    # -- per-request options -------------------------------------------------------------

    def with_options(self, options: ImageOptions | None) -> "Family[C, G]":
        """This family configured for a request's ``options``: itself when they ask nothing
        of it (unset, or detail auto / high), else the variant ``configured`` builds, made
        once per distinct options and kept (at most ``MAX_VARIANTS``) by this instance. A
        variant's ``fingerprint`` holds its effective values, so the preprocessing cache
        keys by them. INVALID_ARGUMENT naming the field, the family and why when the
        family cannot honour the options exactly."""
        if options is None:
            return self
        check_options(options)
        if options.asks_nothing:
            return self
        with _variants_lock:
            variants = self.__dict__.setdefault("_variants", OrderedDict())
            hit = variants.get(options)
            if hit is not None:
                variants.move_to_end(options)
                return hit
        variant = self.configured(options)
        with _variants_lock:
            variant = variants.setdefault(options, variant)
            while len(variants) > MAX_VARIANTS:
                variants.popitem(last=False)
        return variant

    def configured(self, options: ImageOptions) -> "Family[C, G]":
        """The family for ``options`` (checked, and asking something: ``asks_nothing`` is
        False). A family that can honour a field overrides this; by default every size
        and budget field and ``detail: low`` are refused, as the processor takes none."""
        for name, value in options.as_dict().items():
            if name != "detail" or value == "low":
                raise self.refusal(name, value, f"its processor ({self.reference_processor}) has no per-call "
                                   "size or token budget; only detail auto or high (the model's own) is accepted")
        return self

    def refusal(self, field_name: str, value: object, why: str) -> PreprocessError:
        """INVALID_ARGUMENT for an option this family cannot honour exactly."""
        return invalid(f"{field_name} {value} cannot be honoured exactly by the {self.name} family: {why}")

    def effective_options(self, options: ImageOptions | None) -> ImageOptions:
        """The values an image preprocessed by this family (a ``with_options`` variant) for
        ``options`` gets, as echoed per image: by default only the detail, which the
        model's own budget serves (auto is high)."""
        return ImageOptions(detail=effective_detail(options))

    def grid(self, plan: ItemPlan[G]) -> tuple[int, ...]:
        """The image's grid in the family's own terms (echoed per image): its geometry when
        that is a tuple of integers (Qwen (t, h, w), Pixtral rows x columns, Llama 4 tiles,
        LLaVA-NeXT's pinpoint, Inkling rows x columns); () when it has none."""
        g = plan.geometry
        if isinstance(g, tuple) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in g):
            return tuple(int(v) for v in g)
        return ()

    def batch_tensors(self, aux: list[Aux]) -> dict[str, np.ndarray]:
        """Model-specific tensors: each item's rows concatenated on dim 0."""
        if not aux or not aux[0]:
            return {}
        return {k: np.concatenate([a[k] for a in aux], axis=0) for k in aux[0]}

    def positions(self, applied: AppliedLayout, plans: Sequence[ItemPlan[G]],
                  videos: Sequence[RopeSpan] = ()) -> MRope | None:
        """Multimodal rotary positions, or None where the model counts 1-D positions itself.
        ``videos``: the request's videos' M-RoPE items (``VideoFamily.video_items``), in
        any order; none for a family that takes no video."""
        return None

    @property
    def placeholder_token_id(self) -> int:
        """The token the chat template leaves once per image in the prompt. Usually the
        image token itself; families whose expansion uses another token for the features
        (Llama 4: ``<|image|>`` in the prompt, ``<|patch|>`` for features) override it."""
        return self.image_token_id

    def token_ids(self) -> dict[str, int]:
        return {"image": self.image_token_id}

    def fingerprint(self) -> str:
        """Everything that decides this family's output for given image bytes (the
        resolved config is a frozen dataclass, so its repr is complete and stable); made
        once, as a raw or configured variant keys every request by it."""
        key = self.__dict__.get("_fingerprint")
        if key is None:
            key = self.__dict__["_fingerprint"] = f"{type(self).__module__}.{type(self).__name__}:{self.config!r}"
        return key

    def warmup(self) -> None:
        """Compile every kernel this family's requests can reach."""

    def run_batches(self, *batches: list[tuple[int, int]]) -> None:
        """Process random images of these (height, width) sizes, each list as one request's
        batch, into the slots requests get (warm-ups: every kernel signature is reached)."""
        rng = np.random.default_rng(0)
        for sizes in batches:
            plans = [self.plan(h, w, item=i) for i, (h, w) in enumerate(sizes)]
            shape, slots = self.batch_shape(plans)
            batch = np.zeros(shape, self.pixel_dtype)
            for (h, w), plan, slot in zip(sizes, plans, slots):
                rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                self.process_item(DecodedImage(rgb), plan, batch[slot])


def effective_detail(options: ImageOptions | None) -> str:
    """The detail an image gets: low when asked, else high (auto and unset are the model's)."""
    return "low" if options is not None and options.detail == "low" else "high"
