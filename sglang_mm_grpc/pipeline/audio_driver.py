"""A request's audio clips: configure, admit (hash; header, decode, resample, plan, budget),
process (features).

    configure each clip (the feature extractor as the request's options set it)
    -> admit each clip: the container header probed and held to the limits, the clip
       decoded to mono float32 and resampled to the extractor's rate (as vLLM's loader
       and resampler give it), its frames and expansion planned from the sample count,
       the token budget checked
    -> [the driver lays out images, videos and clips together]
    -> process: each clip's tensors, joined as the HF processor returns the batch

A clip is decoded at admission, not after the layout as a video is: only the decoded
sample count is exact for every codec (a header's count is an estimate for most), and
the expansion depends on it. A Plan reads the header alone (``plan_only``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Generic, Sequence

import numpy as np

from ..core.carriers import AudioMeta, AudioOptions, AudioResult
from ..core.errors import Code, PreprocessError
from ..core.hashing import content_hash
from ..core.layout import AppliedLayout, find_placeholders
from ..families import Family
from ..families.audio import AC, AudioFamily, AudioPlan
from ..media import audio as media_audio

#: Audio clips in one request, unless configured otherwise.
DEFAULT_MAX_AUDIOS = 8
#: Tokens one clip may expand into, unless configured otherwise (a request may lower it):
#: vLLM's Inkling limit (``MAX_AUDIO_TOKENS``, 10 minutes at 20 tokens a second).
DEFAULT_MAX_AUDIO_TOKENS = 12000


@dataclass(frozen=True)
class AudioTarget(Generic[AC]):
    """What one clip is processed by: the effective extractor, the options asked
    (merged), and the token budget it is held to."""

    config: AC
    options: AudioOptions
    budget: tuple[int, str]


@dataclass
class AdmittedAudio(Generic[AC]):
    """A clip ready for the layout: its bytes, facts, resampled waveform and plan."""

    hash: str
    data: bytes
    meta: AudioMeta
    wave: np.ndarray  # float32 mono at the extractor's rate
    plan: AudioPlan
    target: AudioTarget[AC]
    timings_ms: dict[str, float] = field(default_factory=dict)


def audio_family(family: Family, why: str = "") -> AudioFamily:
    """The family's audio side: FAILED_PRECONDITION when it takes no audio."""
    if not isinstance(family, AudioFamily) or "audio" not in family.modalities:
        raise PreprocessError(Code.FAILED_PRECONDITION, f"the {family.name} family takes no audio{why}")
    return family


def check_family(family: Family, audios: int) -> None:
    """FAILED_PRECONDITION when clips come to a model that takes none, or without PyAV."""
    if not audios:
        return
    audio_family(family, f" ({audios} audio clip(s) in the request)")
    if not media_audio.audio_available():
        raise PreprocessError(Code.FAILED_PRECONDITION, media_audio.INSTALL_HINT)


def audio_placeholders(family: Family, ids: np.ndarray, audios: int) -> np.ndarray:
    """The audio placeholders' positions, exactly one per clip."""
    if not audios:
        return np.zeros(0, np.int64)
    return find_placeholders(ids, audio_family(family).audio_token_id, audios, "audio clip")


def warmup(family: Family) -> None:
    """Compile the resampler for a family that takes audio (its features warm with it)."""
    if isinstance(family, AudioFamily) and "audio" in family.modalities:
        rate = family.sampling_rate(family.audio_config())
        media_audio.resample(np.zeros(4410, np.float32), 44100, rate)


def configure(family: Family, count: int, max_tokens: int, options: AudioOptions | None,
              per_audio: Sequence[AudioOptions | None] | None) -> list[AudioTarget[Any]]:
    """Each clip's extractor (its options over the request's) and token budget."""
    if per_audio is not None and len(per_audio) != count:
        raise PreprocessError(Code.INVALID_ARGUMENT, f"{len(per_audio)} per-clip options for {count} audio clip(s)")
    if not count:
        return []
    audio = audio_family(family)
    base = options if options is not None else AudioOptions()
    targets = []
    for i in range(count):
        merged = base.merged(per_audio[i] if per_audio is not None else None)
        try:
            config = audio.audio_config(merged)
        except PreprocessError as e:
            raise PreprocessError(e.code, e.detail, item=i, kind="audio") from None
        targets.append(AudioTarget(config, merged, (max_tokens, "the model's max_audio_tokens")))
    return targets


def admit(family: Family, data: bytes, i: int, target: AudioTarget[Any], limits: media_audio.AudioLimits,
          known: str | None = None, deadline: float | None = None) -> AdmittedAudio[Any]:
    """Hash, header (limits), decode, resample and plan; the budget checked."""
    audio = audio_family(family)
    t0 = time.perf_counter()
    digest = known or content_hash(data)
    meta = media_audio.probe(data, limits, i)
    wave = media_audio.decode(data, meta, limits, i, deadline)
    t1 = time.perf_counter()
    wave = media_audio.resample(wave, meta.sample_rate, audio.sampling_rate(target.config))
    t2 = time.perf_counter()
    plan = audio.plan_audio(target.config, len(wave), i)
    _check_budget(plan, i, target)
    return AdmittedAudio(digest, data, meta, wave, plan, target,
                         {"decode": (t1 - t0) * 1e3, "resample": (t2 - t1) * 1e3})


def plan_only(family: Family, data: bytes, i: int, target: AudioTarget[Any], limits: media_audio.AudioLimits,
              known: str | None = None) -> AdmittedAudio[Any]:
    """A clip's plan from its container header alone (a Plan): its sample count there,
    resampled; exact where the header's count is (``AudioMeta.exact``)."""
    audio = audio_family(family)
    meta = media_audio.probe(data, limits, i)
    rate = audio.sampling_rate(target.config)
    samples = media_audio.resampled_length(meta.samples, meta.sample_rate, rate)
    plan = audio.plan_audio(target.config, samples, i)
    _check_budget(plan, i, target)
    return AdmittedAudio(known or content_hash(data), data, meta, np.zeros(0, np.float32), plan, target)


def _check_budget(plan: AudioPlan, i: int, target: AudioTarget[Any]) -> None:
    limit, what = target.budget
    if plan.token_count > limit:
        raise PreprocessError(Code.RESOURCE_EXHAUSTED, f"expands into {plan.token_count} tokens, over {what} "
                              f"({limit})", item=i, kind="audio")


def process(family: Family, admitted: Sequence[AdmittedAudio[Any]]) -> dict[str, np.ndarray]:
    """The clips' tensors, joined as the HF processor returns them."""
    if not admitted:
        return {}
    audio = audio_family(family)
    clips = [audio.process_audio(a.target.config, a.wave[:a.plan.samples], a.plan) for a in admitted]
    return audio.audio_batch(clips)


def output(family: Family, admitted: Sequence[AdmittedAudio[Any]], laid: AppliedLayout,
           clips: Sequence[bytes]) -> dict[str, Any]:
    """The output's audio fields: the clips' facts, tensors and bytes, and the audio token."""
    if not admitted:
        return {}
    return {"audios": results(family, admitted, laid), "audio_tensors": process(family, admitted),
            "raw_audios": [bytes(b) for b in clips], "audio_token_id": audio_family(family).audio_token_id}


def results(family: Family, admitted: Sequence[AdmittedAudio[Any]], laid: AppliedLayout) -> list[AudioResult]:
    """Each clip's facts, its ranges from ``laid`` (the clips' view of the layout)."""
    audio = audio_family(family) if admitted else None
    ranges, runs = laid.structural_ranges, laid.patch_ranges
    return [
        AudioResult(
            hash=a.hash, encoded_bytes=len(a.data), token_count=ranges[i][1], structural_range=ranges[i],
            patch_ranges=runs[i], sample_rate=a.meta.sample_rate, channels=a.meta.channels,
            duration_s=a.plan.samples / audio.sampling_rate(a.target.config) if audio is not None else 0.0,
            samples=a.plan.samples, frames=a.plan.frames, options=a.target.options,
        )
        for i, a in enumerate(admitted)
    ]
