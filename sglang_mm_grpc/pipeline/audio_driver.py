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
the expansion depends on it. A Plan reads the header alone (``plan_only``). A clip the
preprocessing cache holds (same bytes, model spec and extractor) is neither decoded nor
processed: its facts, plan and tensors come from the cache.
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
from .cache import CachedAudio, PreprocessCache, audio_key

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
    cached: CachedAudio | None = None
    key: tuple[str, str] | None = None  # its cache key when a cache is in use


#: A clip from the cache has no waveform.
NO_WAVE = np.zeros(0, np.float32)


@dataclass(frozen=True)
class Lookup:
    """A clip's hash, its cache key (None: no cache) and what the cache holds of it."""

    hash: str
    key: tuple[str, str] | None
    hit: CachedAudio | None

    @classmethod
    def of(cls, data: bytes, target: AudioTarget[Any], known: str | None, cache: PreprocessCache | None,
           spec_key: str, peek: bool = False) -> "Lookup":
        digest = known or content_hash(data)
        if cache is None:
            return cls(digest, None, None)
        key = audio_key(digest, spec_key, target.config)
        hit = cache.peek(key) if peek else cache.get(key)
        return cls(digest, key, hit if isinstance(hit, CachedAudio) else None)

    def admitted(self, data: bytes, i: int, target: AudioTarget[Any]) -> "AdmittedAudio[Any]":
        """The cached clip, its budget checked."""
        assert self.hit is not None
        _check_budget(self.hit.plan, i, target)
        return AdmittedAudio(self.hash, data, self.hit.meta, NO_WAVE, self.hit.plan, target, cached=self.hit,
                             key=self.key)


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
          known: str | None = None, deadline: float | None = None, cache: PreprocessCache | None = None,
          spec_key: str = "", whole: bool = False) -> AdmittedAudio[Any]:
    """Hash; the cached clip, or its header (limits), decode, resample and plan; the budget
    checked either way. The clip is decoded only as far as the family reads it, unless
    ``whole`` (its wave is then the whole clip's)."""
    audio = audio_family(family)
    t0 = time.perf_counter()
    found = Lookup.of(data, target, known, cache, spec_key)
    if found.hit is not None:
        return found.admitted(data, i, target)
    rate = audio.sampling_rate(target.config)
    keep = None if whole else reads_at_most(audio, target.config, limits, rate)
    meta, wave = media_audio.load(data, limits, i, deadline, (keep, rate) if keep is not None else None)
    t1 = time.perf_counter()
    wave = media_audio.resample(wave, meta.sample_rate, rate)
    t2 = time.perf_counter()
    plan = audio.plan_audio(target.config, len(wave), i)
    _check_budget(plan, i, target)
    return AdmittedAudio(found.hash, data, meta, wave, plan, target,
                         {"decode": (t1 - t0) * 1e3, "resample": (t2 - t1) * 1e3}, key=found.key)


def reads_at_most(audio: AudioFamily, config: Any, limits: media_audio.AudioLimits, rate: int) -> int | None:
    """The most samples (at ``rate``) the family reads of a clip as ``config`` asks (a
    truncation, or a buffer such as Qwen2-Audio's 30 s), or None where it reads any clip
    the limits allow to its end. A family's plan depends on a clip's length only up to
    what it keeps (``plan_audio``), so any clip that long plans, and computes, the same."""
    longest = int(limits.max_duration_s * rate) + 1
    try:
        kept = audio.plan_audio(config, longest, 0).samples
    except PreprocessError:
        return None
    return kept if kept < longest else None


def plan_only(family: Family, data: bytes, i: int, target: AudioTarget[Any], limits: media_audio.AudioLimits,
              known: str | None = None, cache: PreprocessCache | None = None, spec_key: str = "") -> AdmittedAudio[Any]:
    """A clip's plan from its container header alone (a Plan): its sample count there,
    resampled; exact where the header's count is (``AudioMeta.exact``), or where the cache
    holds the clip (looked at, never counted)."""
    audio = audio_family(family)
    found = Lookup.of(data, target, known, cache, spec_key, peek=True)
    if found.hit is not None:
        return found.admitted(data, i, target)
    meta = media_audio.probe(data, limits, i)
    rate = audio.sampling_rate(target.config)
    samples = media_audio.resampled_length(meta.samples, meta.sample_rate, rate)
    plan = audio.plan_audio(target.config, samples, i)
    _check_budget(plan, i, target)
    return AdmittedAudio(found.hash, data, meta, NO_WAVE, plan, target)


def _check_budget(plan: AudioPlan, i: int, target: AudioTarget[Any]) -> None:
    limit, what = target.budget
    if plan.token_count > limit:
        raise PreprocessError(Code.RESOURCE_EXHAUSTED, f"expands into {plan.token_count} tokens, over {what} "
                              f"({limit})", item=i, kind="audio")


def process(family: Family, admitted: Sequence[AdmittedAudio[Any]],
            cache: PreprocessCache | None = None) -> dict[str, np.ndarray]:
    """The clips' tensors, joined as the HF processor returns them; each new clip's kept
    in ``cache``."""
    if not admitted:
        return {}
    audio = audio_family(family)
    clips = []
    for a in admitted:
        if a.cached is not None:
            clips.append(a.cached.aux)
            continue
        tensors = audio.process_audio(a.target.config, a.wave[:a.plan.samples], a.plan)
        if cache is not None and a.key is not None:
            cache.put(a.key, CachedAudio(a.meta, a.plan, tensors))
        clips.append(tensors)
    return audio.audio_batch(clips)


def output(family: Family, admitted: Sequence[AdmittedAudio[Any]], laid: AppliedLayout,
           clips: Sequence[bytes], cache: PreprocessCache | None = None) -> dict[str, Any]:
    """The output's audio fields: the clips' facts, tensors and bytes, and the audio token."""
    if not admitted:
        return {}
    return {"audios": results(family, admitted, laid), "audio_tensors": process(family, admitted, cache),
            "raw_audios": [bytes(b) for b in clips], "audio_token_id": audio_family(family).audio_token_id,
            "audio_waves": [a.wave for a in admitted]}


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
