"""Plain data carried between the driver's steps and out to callers.

Nothing here computes (but for packing RGBX pixels on demand); every value is produced
by the driver, a family or the layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class DecodedImage:
    """An image as the HF processor sees it: RGB uint8 after EXIF orientation.

    ``pixels`` is [H, W, 3], or [H, W, 4] RGBX: Pillow's own buffer read in place, the
    fourth byte padding. Kernels that take RGBX read ``pixels``; ``rgb`` is always the
    packed [H, W, 3] C-contiguous array.

    With ``alpha`` (only for a family that flattens transparency itself, see
    ``Family.transparency``) ``pixels`` is RGBA [H, W, 4] and the fourth byte is alpha.
    """

    pixels: np.ndarray  # uint8 [H, W, 3] or RGBX [H, W, 4]; RGBA [H, W, 4] with alpha
    alpha: bool = False

    @property
    def rgb(self) -> np.ndarray:
        """Packed RGB. From RGBX it is copied once and replaces ``pixels``, so the
        padded buffer is released rather than held next to its copy."""
        if self.alpha:
            raise ValueError("an RGBA image has no RGB form until its transparency is flattened")
        if self.pixels.shape[2] == 4:
            from ..kernels.pixels import pack_rgb  # here: the carriers load without the kernels (a client needs none)

            object.__setattr__(self, "pixels", pack_rgb(self.pixels))
        return self.pixels

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])


@dataclass(frozen=True)
class FieldLayout:
    """How vLLM splits each tensor into items: batched on dim 0, or flat by a sizes tensor.

    Tensors in neither are shared across items. The rest is what vLLM's model code for
    the checkpoint declares (each family cites it): the payload carries these facts, the
    wire layer never looks them up.
    """

    batched: tuple[str, ...] = ()
    flat: dict[str, str] = field(default_factory=dict)
    #: Tensors vLLM keeps on the CPU (``keep_on_cpu=True`` in the model's
    #: ``MultiModalFieldConfig``), sent as ``keep_on_cpu_keys``.
    keep_on_cpu: tuple[str, ...] = ()
    #: The model's forward kwarg for ``pixel_values`` (vLLM ``encoder_input_key``).
    encoder_input_key: str = "pixel_values"
    #: The sizes tensor that vLLM's own processor crops each item of ``pixel_values`` to
    #: before batching, a step the gRPC servicer does not run: a payload whose items are
    #: padded cannot be split for such a model (None: items are never padded, or the
    #: model itself ignores the padding).
    unpadded_by: str | None = None


#: OpenAI's ``detail`` values a request may give (``ImageOptions.detail``).
DETAILS = ("auto", "low", "high")


@dataclass(frozen=True)
class ImageOptions:
    """What one request asks of an image's preprocessing, beyond the model's defaults.

    None (every field) means "the model's". A family honours what it can reproduce
    exactly (``Family.with_options``) and refuses the rest; the same type carries the
    effective values back (``ImageResult.options``). Per-image options override the
    request's field by field (``merged``).
    """

    min_pixels: int | None = None
    max_pixels: int | None = None
    max_tokens: int | None = None  # the most tokens the image may expand into
    detail: str | None = None  # one of DETAILS; None: auto

    def merged(self, over: "ImageOptions | None") -> "ImageOptions":
        """These options with every field ``over`` sets replacing ours."""
        if over is None or over == ImageOptions():
            return self
        return ImageOptions(*(o if o is not None else s for s, o in zip(self._values(), over._values())))

    def _values(self) -> tuple:
        return self.min_pixels, self.max_pixels, self.max_tokens, self.detail

    @property
    def asks_nothing(self) -> bool:
        """Nothing beyond the model's defaults: no size field, detail unset, auto or high."""
        return self.min_pixels is None and self.max_pixels is None and self.max_tokens is None and (
            self.detail in (None, "auto", "high"))

    def as_dict(self) -> dict:
        """The fields that are set, by name."""
        return {k: v for k, v in zip(("min_pixels", "max_pixels", "max_tokens", "detail"), self._values())
                if v is not None}


@dataclass(frozen=True)
class ImageResult:
    """Per-image facts a router or backend needs (no pixels)."""

    hash: str  # lowercase hex blake3 of the encoded bytes
    height: int
    width: int
    resized_height: int
    resized_width: int
    encoded_bytes: int
    token_count: int  # whole expansion, structural tokens included
    structural_range: tuple[int, int]  # (offset, length) in the expanded ids
    patch_ranges: tuple[tuple[int, int], ...]  # each maximal run of the image token
    cached: bool = False  # from the preprocessing cache: no decode, no pixel work
    #: The family's grid for the image (``Family.grid``: Qwen (t, h, w) patches, Pixtral
    #: rows x cols of tokens, Llama 4 tiles, LLaVA-NeXT the pinpoint, ...); () when none.
    grid: tuple[int, ...] = ()
    #: The effective options the image was preprocessed with (``Family.effective_options``).
    options: ImageOptions | None = None


@dataclass(frozen=True)
class VideoOptions:
    """What one request asks of a video's sampling and preprocessing (None: the model's).

    ``fps`` / ``num_frames`` (exclusive) turn frame sampling on, as HF's
    ``do_sample_frames=True`` with them; ``min_frames`` / ``max_frames`` bound what fps
    sampling takes; ``min_pixels`` / ``max_pixels`` are the video processor's per-frame
    size bounds; ``max_tokens`` the most tokens the whole video may expand into.
    """

    fps: float | None = None
    num_frames: int | None = None
    min_frames: int | None = None
    max_frames: int | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    max_tokens: int | None = None

    def merged(self, over: "VideoOptions | None") -> "VideoOptions":
        """These options with every field ``over`` sets replacing ours."""
        if over is None:
            return self
        return VideoOptions(*(o if o is not None else s for s, o in zip(self._values(), over._values())))

    def _values(self) -> tuple:
        return (self.fps, self.num_frames, self.min_frames, self.max_frames, self.min_pixels, self.max_pixels,
                self.max_tokens)

    def as_dict(self) -> dict:
        """The fields that are set, by name."""
        names = ("fps", "num_frames", "min_frames", "max_frames", "min_pixels", "max_pixels", "max_tokens")
        return {k: v for k, v in zip(names, self._values()) if v is not None}


@dataclass(frozen=True)
class VideoMeta:
    """A video stream's facts as HF's PyAV loader (``read_video_pyav``) derives them from
    the container header, plus what the limits check (nothing decoded)."""

    total_num_frames: int  # the stream's claimed frame count
    fps: float  # the stream's average rate
    duration_s: float  # total_num_frames / fps, as HF computes it
    height: int  # the coded frame size (HF's frames are not rotated)
    width: int
    rotation: int = 0  # degrees from the display matrix (reported; HF does not apply it)
    codec: str = ""
    container_duration_s: float | None = None  # the container's own claim


@dataclass(frozen=True)
class VideoResult:
    """Per-video facts a router or backend needs (no pixels)."""

    hash: str  # lowercase hex blake3 of the encoded bytes
    height: int  # decoded frame size (HF applies no rotation)
    width: int
    resized_height: int
    resized_width: int
    encoded_bytes: int
    token_count: int  # whole expansion (Qwen3-VL: timestamps and vision start/end included)
    structural_range: tuple[int, int]  # (offset, length) in the expanded ids
    patch_ranges: tuple[tuple[int, int], ...]  # each maximal run of the video token
    cached: bool = False
    grid: tuple[int, ...] = ()  # (t, h, w) patches
    fps: float = 0.0  # the source's, as HF's metadata has it
    total_frames: int = 0
    duration_s: float = 0.0
    frame_indices: tuple[int, ...] = ()
    timestamps_s: tuple[float, ...] = ()  # Qwen3-VL: per temporal group, as its prompt shows them
    second_per_grid: float | None = None  # Qwen2.5-VL
    options: VideoOptions | None = None  # effective
    rotation: int = 0


@dataclass(frozen=True)
class AudioOptions:
    """What one request asks of an audio clip (None: the model's).

    ``max_seconds``: keep only the clip's first seconds (the feature extractor's
    ``truncation=True`` with ``max_length`` that many samples at its rate).
    """

    max_seconds: float | None = None

    def merged(self, over: "AudioOptions | None") -> "AudioOptions":
        """These options with every field ``over`` sets replacing ours."""
        if over is None or over.max_seconds is None:
            return self
        return over

    def as_dict(self) -> dict:
        """The fields that are set, by name."""
        return {} if self.max_seconds is None else {"max_seconds": self.max_seconds}


@dataclass(frozen=True)
class AudioMeta:
    """An audio stream's facts from its container header (nothing decoded), as the limits
    and the plan read them."""

    sample_rate: int  # the stream's own rate, Hz
    channels: int
    samples: int  # per channel at ``sample_rate``: the header's count, or duration x rate
    duration_s: float  # samples / sample_rate
    codec: str = ""
    container: str = ""
    exact: bool = False  # ``samples`` is the decoded count (PCM, FLAC's STREAMINFO), not an estimate


@dataclass(frozen=True)
class AudioResult:
    """Per-clip facts a router or backend needs (no features)."""

    hash: str  # lowercase hex blake3 of the encoded bytes
    encoded_bytes: int
    token_count: int  # whole expansion
    structural_range: tuple[int, int]  # (offset, length) in the expanded ids
    patch_ranges: tuple[tuple[int, int], ...]  # each maximal run of the audio token
    sample_rate: int  # the source's
    channels: int
    duration_s: float  # of the samples the features were made from
    samples: int  # at the feature extractor's rate, after resampling and truncation
    frames: int  # feature frames
    cached: bool = False
    options: AudioOptions | None = None  # effective


@dataclass
class PreprocessOutput:
    """Everything one request produced. Arrays are what the HF processor returns."""

    input_ids: np.ndarray  # int64 [len], expanded
    original_input_ids: np.ndarray  # int64, as given
    pixel_values: np.ndarray  # float32, the HF processor's shape and layout
    tensors: dict[str, np.ndarray]  # model-specific tensors by HF name
    images: list[ImageResult]
    image_token_id: int
    positions: np.ndarray | None = None  # int64 [3, len] for M-RoPE families
    rope_delta: int | None = None
    raw_images: list[bytes] = field(default_factory=list, repr=False)
    timings_ms: dict[str, float] = field(default_factory=dict)  # request stages
    item_timings_ms: list[dict[str, float]] = field(default_factory=list)  # per image: decode, process
    videos: list[VideoResult] = field(default_factory=list)
    pixel_values_videos: np.ndarray | None = None  # float32, the HF video processor's shape
    #: HF names: video_grid_thw int64 [n, 3]; second_per_grid_ts float32 [n] (Qwen2.5-VL);
    #: patches_per_video int64 [n] (vLLM's flat split)
    video_tensors: dict[str, np.ndarray] = field(default_factory=dict)
    video_token_id: int | None = None
    raw_videos: list[bytes] = field(default_factory=list, repr=False)
    audios: list[AudioResult] = field(default_factory=list)
    #: The family's audio tensors by HF name (e.g. Inkling's audio_input_ids int32 [sum T, 80]
    #: and audio_input_ids_mask ...), every clip's rows in order.
    audio_tensors: dict[str, np.ndarray] = field(default_factory=dict)
    audio_token_id: int | None = None
    raw_audios: list[bytes] = field(default_factory=list, repr=False)
    #: Each clip's decoded mono float32 wave at the extractor's rate, whole (empty for a clip
    #: from the cache): what vLLM keys a clip by (the sidecar).
    audio_waves: list[np.ndarray] = field(default_factory=list, repr=False)

    @property
    def hashes(self) -> list[str]:
        return [im.hash for im in self.images]

    @property
    def token_counts(self) -> list[int]:
        return [im.token_count for im in self.images]

    @property
    def structural_ranges(self) -> list[tuple[int, int]]:
        return [im.structural_range for im in self.images]

    @property
    def patch_ranges(self) -> list[tuple[tuple[int, int], ...]]:
        return [im.patch_ranges for im in self.images]


@dataclass
class PlanOutput:
    """What a request will become, from the image headers alone (``Preprocessor.plan``):
    per image everything an ``ImageResult`` says, and the expanded ids' length."""

    images: list[ImageResult]
    input_ids_length: int
    image_token_id: int
    timings_ms: dict[str, float] = field(default_factory=dict)
    videos: list[VideoResult] = field(default_factory=list)  # from the container headers
    audios: list[AudioResult] = field(default_factory=list)  # from the container headers
    #: The pixel tensors' bytes by wire dtype ("float32", ..., "uint8" where raw pixels exist).
    pixel_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def token_counts(self) -> list[int]:
        return [im.token_count for im in self.images]
