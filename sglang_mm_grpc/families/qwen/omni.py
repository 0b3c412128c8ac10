"""Qwen3-Omni and Qwen2.5-Omni (the thinkers): Qwen-VL images and videos and Whisper log-mel
audio in one prompt, HF ``Qwen3OmniMoeProcessor`` / ``Qwen2_5OmniProcessor`` (transformers
5.24) as vLLM 0.33 runs them. What follows is Qwen3-Omni's; Qwen2.5-Omni's differences
(``GENERATIONS``) are at the end.

Images: ``Qwen2VLImageProcessor`` (``image_processing_auto``: ``qwen3_omni_moe``), so the
``QwenVL`` family with the checkpoint's knobs (patch 16, merge 2, mean and std 0.5); the
thinker's token ids sit under ``config.json``'s ``thinker_config``. vLLM's model
(``qwen3_omni_moe_thinker.py``) does not normalize on the device: float pixels only.

Audio: ``WhisperFeatureExtractor`` (128 mel bands, hop 160, n_fft 400), called by the
processor with ``padding=True, truncation=False`` (``Qwen3OmniMoeProcessor.audio_kwargs``),
so a clip is never cut to ``n_samples`` and one clip alone is not padded. vLLM first
zero-pads each clip to a multiple of ``hop_length`` ("to make sure the cache works with
padding=True", ``Qwen3OmniMoeThinkerMultiModalProcessor._get_hf_mm_inputs``) and then
counts ``len // hop`` frames (``_postprocess_hf_mm_data``): a clip of ``L`` samples
gives ``ceil(L / 160)`` frames, the log-mel of the padded clip (``whisper_features``).
This family computes each clip alone, as vLLM does for one clip or a clip whose
neighbours its cache holds; vLLM's call on several new clips at once pads them to the
longest, which changes the last frame of a shorter clip padded by fewer than 41 samples
(its centred window reads zeros there, where alone its reflection reaches the signal).

Tokens: ``_get_feat_extract_output_lengths`` of the frames, ``n_window`` from
``thinker_config.audio_config`` (50); a clip's ``<|audio_pad|>`` (151675) becomes that
many (vLLM: ``[audio_token_id] * n``; refused there at 0). ``<|audio_start|>`` and
``<|audio_end|>`` around it are ordinary tokens. Positions (M-RoPE): the thinker's
``get_rope_index`` gives audio tokens text positions and images Qwen2-VL's, so the
``QwenVL`` rule holds for a prompt of images and clips.

Videos: ``Qwen2VLVideoProcessor`` (``video_processing_auto``), configured from
preprocessor_config.json (there is no video_preprocessor_config.json), every frame (the
class's ``do_sample_frames`` is off), at the size bounds the processor passes on every call
(``Qwen3OmniMoeProcessor.videos_kwargs``: 128 to 768 tokens of 32x32 pixels a frame, which
win over the checkpoint's); each becomes ``<|video_pad|>`` per merged patch, and its
``video_second_per_grid`` is the temporal patch over the call's fps, 1.0 when none
(``_process_videos``): 2.0 seconds whatever the video's rate. vLLM names it
``second_per_grid_ts`` (``_postprocess_hf_mm_data``), as here. The thinker's positions give
a video's temporal groups ``t * second_per_grid * position_id_per_seconds``, the interval the
``QwenVL`` rule takes (Qwen2.5-VL's, with ``tokens_per_second``); the text after a video
starts one past its largest position (``positions_after_max``). Audio within a video
(``use_audio_in_video``) is not taken: the gateway turns it off.

Tensors: ``whisper_features.batch`` (``input_audio_features`` [clips, 128, Tmax],
``feature_attention_mask``, ``audio_feature_lengths``), the layout the gateway sends
(smg ``registry/qwen3_omni.rs``).

Qwen2.5-Omni (``processing_qwen2_5_omni.py``, vLLM's ``qwen2_5_omni_thinker.py``): patch 14
and the checkpoint's (CLIP) mean and std; the processor calls the extractor with
``padding="max_length"`` and its default truncation, so a clip is cut to ``n_samples`` (300
s) and padded to it, and vLLM pads nothing first: ``min(L, n_samples)`` samples make
``ceil(samples / 160)`` frames (the mask's), whose features are those of the padded buffer
(computed here as far as any frame reads the clip: the frames past it are silence, which
never raise the maximum). Tokens: ``((l - 1) // 2 + 1 - 2) // 2 + 1`` (no chunking); the
thinker's ids are ``*_token_index`` (``<|AUDIO|>`` 151646). Videos: 128 to 768 tokens of
28x28 pixels a frame, and the call's fps 2.0 when none (a second per grid of 1.0), 25
position ids a second.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...core.carriers import AudioOptions
from ...core.errors import Code, PreprocessError
from ...core.layout import Expansion
from .. import hf_keys
from ..audio import AudioFamily, AudioPlan, kept_samples
from ..base import CLIP_MEAN, CLIP_STD
from . import image as qwen_vl, video as qwen_video, whisper_features
from .image import Grid, QwenVL, QwenVLConfig

@dataclass(frozen=True)
class Generation:
    """What tells Qwen3-Omni and Qwen2.5-Omni apart: their processors' and thinkers' defaults."""

    name: str
    model_types: tuple[str, ...]
    processor: str
    patch_size: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    audio_token_id: int
    video_pixels: tuple[int, int]  # the processor's ``videos_kwargs`` size, passed on every call
    video_fps: float  # the fps ``_process_videos`` divides the temporal patch by when the call gives none
    position_id_per_seconds: int  # the thinker config's default
    n_samples: int | None  # the extractor's padding and cut (Qwen2.5-Omni); None: vLLM pads to the hop


QWEN3 = Generation("qwen3_omni", ("qwen3_omni_moe", "qwen3_omni_moe_thinker"), "Qwen3OmniMoeProcessor", 16,
                   (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 151675, (128 * 32 * 32, 768 * 32 * 32), 1.0, 25, None)
QWEN2_5 = Generation("qwen2_5_omni", ("qwen2_5_omni", "qwen2_5_omni_thinker"), "Qwen2_5OmniProcessor", 14, CLIP_MEAN,
                     CLIP_STD, 151646, (128 * 28 * 28, 768 * 28 * 28), 2.0, 25, 4_800_000)
GENERATIONS = {g.name: g for g in (QWEN3, QWEN2_5)}


@dataclass(frozen=True)
class Qwen3OmniConfig(QwenVLConfig):
    """Qwen-VL's image and video knobs, and the audio's: the thinker's ids (``thinker_config``)
    and the extractor's; ``n_samples`` as ``Generation``'s."""

    model_type: str = "qwen3_omni_moe"
    patch_size: int = 16
    min_pixels: int = 3136
    max_pixels: int = 12845056
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    audio_token_id: int = 151675  # <|audio_pad|>
    audio: whisper_features.LogMelConfig = whisper_features.LogMelConfig()
    n_samples: int | None = None


def matches(preprocessor: dict, config: dict, generation: Generation = QWEN3) -> bool:
    return config.get("model_type") in generation.model_types or (
        preprocessor.get("processor_class") == generation.processor)


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None,
                   generation: Generation = QWEN3) -> Qwen3OmniConfig:
    """From preprocessor_config.json (the image processor's and the extractor's knobs) and
    config.json (its ``thinker_config``, or a thinker's own config at the top level; ids
    spelled ``*_token_id`` or ``*_token_index``)."""
    g = generation
    raw = config.get("thinker_config") or config
    thinker = {**{k.replace("_token_index", "_token_id"): v for k, v in raw.items() if k.endswith("_token_index")},
               **raw}
    d = Qwen3OmniConfig(model_type=g.model_types[0], patch_size=g.patch_size, image_mean=g.image_mean,
                        image_std=g.image_std, audio_token_id=g.audio_token_id, n_samples=g.n_samples)
    vl = qwen_vl.config_from_hf(preprocessor, {**thinker, "model_type": d.model_type}, video={})
    n_window = hf_keys.get(thinker.get("audio_config") or {}, "n_window", default=d.audio.n_window)
    fields = {f: getattr(vl, f) for f in vl.__dataclass_fields__}
    fields["video"] = _video(preprocessor, thinker, vl, g)
    fields["min_pixels"], fields["max_pixels"] = hf_keys.pixel_bounds(preprocessor, d.min_pixels, d.max_pixels)
    fields["patch_size"] = hf_keys.as_int(hf_keys.get(preprocessor, "patch_size", default=d.patch_size), "patch_size")
    n_samples = g.n_samples and hf_keys.as_int(hf_keys.get(preprocessor, "n_samples", default=g.n_samples),
                                               "n_samples")
    return Qwen3OmniConfig(
        **{**fields, **hf_keys.mean_std(preprocessor, d.image_mean, d.image_std)},
        audio_token_id=hf_keys.token_id(thinker, "audio_token_id", default=d.audio_token_id),
        audio=whisper_features.LogMelConfig(**whisper_features.config_from_hf(preprocessor, n_window, d.audio)),
        n_samples=n_samples,
    )


def _video(preprocessor: dict, thinker: dict, vl: QwenVLConfig, g: Generation) -> qwen_video.VideoConfig:
    """The video processor as the thinker's processor calls it (module docstring)."""
    ids = {k: getattr(vl, k) for k in ("video_token_id", "vision_start_token_id", "vision_end_token_id")}
    video = qwen_video.video_config_from_hf(preprocessor, {"model_type": g.model_types[0]}, ids, None)
    pid = hf_keys.as_int(hf_keys.get(thinker, "position_id_per_seconds", default=g.position_id_per_seconds),
                         "position_id_per_seconds")
    return replace(video, min_pixels=g.video_pixels[0], max_pixels=g.video_pixels[1], tokens_per_second=pid,
                   nominal_fps=g.video_fps)


@dataclass(frozen=True)
class ExtractorCall:
    """The extractor a request's options configure: the model's, the samples kept, and the
    Qwen2.5-Omni extractor's padding (``n_samples``; None: Qwen3-Omni's)."""

    config: whisper_features.LogMelConfig
    max_samples: int | None = None  # truncation=True, max_length (None: the whole clip)
    n_samples: int | None = None

    def kept(self, samples: int) -> int:
        """The clip's samples the features see."""
        limits = [n for n in (self.max_samples, self.n_samples) if n is not None]
        return min([int(samples), *limits])

    def frames(self, samples: int) -> int:
        """The mask's frames: the padded clip's (Qwen3-Omni), or the ``[::hop]`` rescale of the
        sample mask over the padded buffer (Qwen2.5-Omni)."""
        hop = self.config.hop_length
        if self.n_samples is None:
            return self.total(samples) // hop
        return min(self.buffer() // hop, -(-self.kept(samples) // hop))

    def buffer(self) -> int:
        """Qwen2.5-Omni: the length the extractor pads every clip to (``max_length``)."""
        assert self.n_samples is not None
        return self.max_samples if self.max_samples is not None else self.n_samples

    def total(self, samples: int) -> int:
        """The samples the STFT reads: the clip zero-padded to a multiple of the hop (vLLM),
        then cut to ``max_samples``; Qwen2.5-Omni: the buffer, as far as a frame reads the clip."""
        hop = self.config.hop_length
        if self.n_samples is not None:
            return min(self.buffer(), -(-(self.kept(samples) + self.config.n_fft) // hop) * hop)
        n = -(-int(samples) // hop) * hop
        return n if self.max_samples is None else min(n, self.max_samples)


class Qwen3Omni(QwenVL, AudioFamily[QwenVLConfig, Grid, ExtractorCall]):
    name = "qwen3_omni"
    modalities = ("image", "video", "audio")
    audio_features_key = "input_audio_features"
    positions_after_max = True
    config: Qwen3OmniConfig

    def __init__(self, config: Qwen3OmniConfig):
        if config.audio_token_id in (config.image_token_id, config.video_token_id):
            raise hf_keys.ConfigError("the audio token must differ from the image and video tokens")
        super().__init__(config)
        self.reference_processor += f" + WhisperFeatureExtractor ({GENERATIONS[self.name].processor}, as vLLM calls it)"
        self.audio_token_id = config.audio_token_id
        self.audio_field_layout = whisper_features.field_layout()

    def token_ids(self) -> dict[str, int]:
        return {**super().token_ids(), "audio_pad": self.config.audio_token_id}

    def audio_config(self, options: AudioOptions | None = None) -> ExtractorCall:
        cfg = self.config.audio
        return ExtractorCall(cfg, kept_samples(options, cfg.sampling_rate), self.config.n_samples)

    def sampling_rate(self, config: ExtractorCall) -> int:
        return config.config.sampling_rate

    def plan_audio(self, config: ExtractorCall, samples: int, item: int) -> AudioPlan:
        if samples <= 0:
            raise PreprocessError(Code.INVALID_ARGUMENT, "the clip has no samples", item=item, kind="audio")
        cfg = config.config
        total = config.total(samples)
        if total <= cfg.n_fft // 2:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"{total} samples make no feature frame (the centred "
                                  f"STFT needs more than {cfg.n_fft // 2})", item=item, kind="audio")
        frames = config.frames(samples)
        tokens = (whisper_features.token_count(frames, cfg.n_window) if config.n_samples is None
                  else whisper_features.conv_token_count(frames))
        if tokens <= 0:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"{frames} feature frame(s) make no token (vLLM refuses "
                                  "the clip as too short)", item=item, kind="audio")
        return AudioPlan(min(samples, config.kept(samples), total), frames,
                         Expansion.repeat(self.audio_token_id, tokens))

    def process_audio(self, config: ExtractorCall, wave: np.ndarray, plan: AudioPlan) -> dict[str, np.ndarray]:
        feats = whisper_features.features(wave[:plan.samples], config.config, config.total(plan.samples))
        return {"input_audio_features": np.ascontiguousarray(feats[:, :plan.frames]),
                "audio_feature_lengths": np.array([plan.frames], np.int64)}

    def audio_batch(self, clips: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return whisper_features.batch(clips)

    def warmup(self) -> None:
        super().warmup()
        whisper_features.warmup(self.config.audio)



class Qwen2_5Omni(Qwen3Omni):
    name = "qwen2_5_omni"
