#!/usr/bin/env python3
"""Audio bench (every audio family): ours against vLLM 0.33's loader and resampler with the
HF features vLLM calls for each model, per family, per clip and per stage, side by side in
one run.

    .venv/bin/python scripts/bench_audio.py [--families inkling qwen3-asr ...] [--repeats 7]
        [--short-repeats 25] [--reference-python /work/vllm-venv/bin/python]
        [--reference-pythonpath /work/tf524] [--torch-threads default 1] [--durations 5 30 300]
        [--formats mp3 wav] [--clip-dir DIR] [--json out.json]

Families (``--families``, default all; the preset each runs, its reference features):

* ``inkling`` (``thinkingmachines/Inkling``): ``InklingFeatureExtractor()([wave],
  sampling_rate=16000, return_tensors="pt")``, ``InklingProcessor._extract_dmel_bins`` and
  ``ids[:n]`` joined, as vLLM's Inkling processor does (the transformers classes' defaults,
  which are the preset's); tokens: one a frame;
* ``qwen3-asr`` (``Qwen/Qwen3-ASR-1.7B-hf``): ``Qwen3ASRProcessor._process_audio`` with
  ``Qwen3ASRFeatureExtractor()`` and the processor's ``audio_kwargs``, the clip alone (vLLM's
  ``_call_hf_processor``), the mask's frames kept (``_postprocess_hf_mm_data``);
* ``qwen3-omni`` (``Qwen/Qwen3-Omni-30B-A3B-Instruct``): the clip zero-padded to a multiple
  of the hop (vLLM's ``pad_to_hop_length``), then ``Qwen3OmniMoeProcessor._process_audio``
  with the checkpoint's ``WhisperFeatureExtractor`` and ``audio_kwargs``;
* ``qwen2-audio`` (``Qwen/Qwen2-Audio-7B-Instruct``): ``Qwen2AudioProcessor._process_audio``
  with the checkpoint's ``WhisperFeatureExtractor`` (``sampling_rate``, ``truncation=True``
  as vLLM adds them): every clip cut and padded to 30 s, the whole [128, 3000] compared;
* ``phi4mm`` (``microsoft/Phi-4-multimodal-instruct``): ``Phi4MultimodalFeatureExtractor()
  ([wave], sampling_rate=16000, return_tensors="pt")`` (``audio_input_features``,
  ``audio_embed_sizes``), as ``scripts/gen_phi4_audio_fixtures.py`` calls it;
* ``qwen2.5-omni`` (``Qwen/Qwen2.5-Omni-7B``): ``Qwen2_5OmniProcessor._process_audio``, the
  extractor padding every clip to 300 s, the mask's frames kept.

The Qwen and Phi-4 calls are the fixture scripts' (``scripts/gen_*_fixtures.py``; their
extractor knobs are repeated here, the reference importing neither them nor this package).
Every family takes 16 kHz (checked): decode and resample are the same on every family's
rows, timed again with each.

Clips (``tests/audiogen.py`` ``clip(...)``: a few tones per channel and seeded noise):
``mp3`` 44.1 kHz stereo MP3 (libmp3lame at its default bitrate) and ``wav`` 16 kHz mono
16-bit WAV, each ``--durations`` seconds long (5 s, 30 s and 5 min by default).

Ours, in this process (one thread, malloc tuned as ``serve`` tunes it), per family:

* decode: ``media.audio.probe`` + ``media.audio.decode`` (bytes -> float32 mono at the
  clip's rate);
* resample: ``media.audio.resample`` to 16 kHz (a no-op at 16 kHz);
* features: through the family object of the preset's preprocessor: ``cfg =
  fam.audio_config()``, ``plan = fam.plan_audio(cfg, samples, 0)``, ``fam.process_audio(cfg,
  wave16, plan)`` (Inkling: the int32 dMel bins; the others: float32 log-mel);
* end to end: ``Preprocessor.from_model(preset, cache_bytes=0).preprocess([],
  audios=[clip], use_cache=False)`` (the prompt: the clip's placeholder alone): the whole
  call (hash, header, decode, resample, plan, layout, features); no cache can answer. It
  decodes only as far as the family reads (Qwen2-Audio: 30 s), where the stages above
  take the whole clip.

The reference, in a process of its own (``--reference-python``, a venv with vLLM, torch and
torchaudio; ``--reference-pythonpath`` put first on its path, where transformers 5.24, the version
the fixture scripts ran, lives; the vLLM venv's own is older) that never imports this
package, the clip's bytes in memory:

* decode: ``vllm.multimodal.media.audio.AudioMediaIO().load_bytes(data)`` (``load_audio``
  at the native rate with its default "auto" backend chain: torchcodec, then soundfile,
  then PyAV; the backend that answered is printed);
* resample: ``vllm.multimodal.audio.AudioResampler(16000, method="torchaudio")`` and
  ``normalize_audio`` to mono, as the multimodal parser calls them (torchaudio's
  ``Resample``, which vLLM runs at one thread with oneDNN off);
* features: the family's HF call above, its frame and token counts with it;
* end to end: the three in a row.

Torch threads (``--torch-threads``): one reference process per setting (each serving every
family), all timed in the same rounds. ``default`` (the first table) leaves torch at its
default, as a plain HF user has it (all cores: printed); ``1`` is what vLLM itself runs the
processor at (its renderer calls ``mm_processor.apply`` inside
``set_default_torch_num_threads()``: OMP_NUM_THREADS, else 1). On a machine whose cores
other work is using, torch's OpenMP threads can wait on each other for tens of milliseconds
a call (wall time far above one thread's, CPU time too); the CPU table shows it.

Each stage is timed apart (wall clock), and the end to end as a whole call of its own
(also its process CPU time, all threads). Every clip is run once untimed on every side
first (warm); then one call on each side in turn, the order rotating every round, so a
slow stretch of a shared machine lands on all of them; medians and minima over
``--repeats`` rounds for clips of a minute or more, ``--short-repeats`` for shorter ones.
Ratios are reference / ours (above 1: ours is faster), of the medians (of the minima in
parentheses).

The outputs are compared on every clip: the decoded and the resampled waves (equal, or the
largest difference), the features of the end to end call and the frame and token counts.
Inkling's bins: equal, or how many of them differ (the reference's float32 FFT can flip a
bin where a band sits right on a bin boundary, e.g. on pure tones). The log-mel families:
the largest absolute difference (the reference's float32 FFT and matmul decide the last
digits; ours is within a bound, not equal). Where the features differ and the 16 kHz waves
do too, ours on the reference's own 16 kHz wave is compared as well (the features stage
alone). Nothing is asserted
about the times. ``--json`` writes every round, each row with its family.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
TARGET_SR = 16000
#: The clip kinds: audiogen.clip(...) arguments and the file's extension.
FORMATS = {
    "mp3": dict(rate=44100, channels=2, fmt="mp3", ext="mp3", label="MP3 44.1 kHz stereo"),
    "wav": dict(rate=16000, channels=1, fmt="wav_s16", ext="wav", label="WAV 16 kHz mono s16"),
}
STAGES = ("decode", "resample", "features", "e2e")
STAGE_NAMES = {"decode": "decode", "resample": "resample", "features": "features", "e2e": "end to end"}


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def timed_round(side, data: bytes) -> dict:
    """Each stage of ``side`` (ours or the reference: ``decode``, ``resample``, ``features``,
    ``whole``) timed apart, then the whole chain (wall and process CPU ms)."""
    t0 = time.perf_counter()
    wave, sr = side.decode(data)
    decode_ms = _ms(t0)
    t0 = time.perf_counter()
    wave16 = side.resample(wave, sr)
    resample_ms = _ms(t0)
    t0 = time.perf_counter()
    side.features(wave16)
    features_ms = _ms(t0)
    del wave, wave16
    t0, c0 = time.perf_counter(), time.process_time()
    side.whole(data)
    return {"decode": decode_ms, "resample": resample_ms, "features": features_ms, "e2e": _ms(t0),
            "e2e_cpu": (time.process_time() - c0) * 1e3}


# -- the reference's features per family (its process only: torch, transformers) -------------
#
# Each builder returns ``features(wave16) -> (tensor, frames, tokens)`` and what it called.

#: The Qwen checkpoints' WhisperFeatureExtractor (preprocessor_config.json), as
#: scripts/gen_qwen3_omni_fixtures.py (Qwen3-Omni; Qwen2.5-Omni with n_samples 4800000) and
#: scripts/gen_qwen2_audio_fixtures.py (chunk_length 30) give them.
OMNI_EXTRACTOR = dict(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=300, dither=0.0,
                      padding_value=0.0, return_attention_mask=True)
QWEN2_AUDIO_EXTRACTOR = dict(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=30,
                             padding_value=0.0, return_attention_mask=True)


def _extractor_info(fe, call: str) -> dict:
    knobs = ("feature_size", "sampling_rate", "hop_length", "n_fft", "win_length", "window_size", "min_length",
             "chunk_length", "n_samples")
    return {"call": call, "extractor": type(fe).__name__,
            **{k: getattr(fe, k) for k in knobs if isinstance(getattr(fe, k, None), (int, float))}}


class _Tokenizer:  # InklingProcessor's __init__ reads two token ids; the bins use neither
    def encode(self, text, add_special_tokens=False):
        return [0]


def _ref_inkling():
    from unittest import mock

    import torch
    from transformers.models.inkling import InklingFeatureExtractor, InklingProcessor
    from transformers.processing_utils import ProcessorMixin

    fe = InklingFeatureExtractor()
    with mock.patch.object(ProcessorMixin, "__init__", lambda *a, **k: None):
        proc = InklingProcessor(tokenizer=_Tokenizer())  # its real __init__ (bin centers)

    def features(wave16):
        feats = fe([wave16], sampling_rate=fe.sampling_rate, return_tensors="pt")
        ids = proc._extract_dmel_bins(feats["input_features"])
        counts = feats["input_features_mask"].sum(-1)
        n = int(counts.sum())
        return torch.cat([x[:k] for x, k in zip(ids, counts.tolist())]), n, n

    info = _extractor_info(fe, "InklingFeatureExtractor + InklingProcessor._extract_dmel_bins, ids[:n]")
    info.update(num_dmel_bins=proc.num_dmel_bins, dmel_min_value=proc.dmel_min_value,
                dmel_max_value=proc.dmel_max_value)
    return features, info


def _qwen(cls, extractor, audio_token: str, mask_key: str, keep_masked: bool, pad_to_hop: bool = False, **extra):
    """``cls._process_audio`` on the clip alone with ``extractor`` (no tokenizer: the
    fixture scripts' way) and the processor's ``audio_kwargs`` under ``extra``; the mask's
    frames kept (``keep_masked``) as vLLM keeps them; ``pad_to_hop``: vLLM's Qwen3-Omni
    zero-padding of the clip to a multiple of the hop first."""
    import numpy as np

    proc = cls.__new__(cls)
    proc.feature_extractor, proc.audio_token = extractor, audio_token
    kwargs = {**cls.audio_kwargs, "return_tensors": "pt", **extra}
    hop = extractor.hop_length

    def features(wave16):
        if pad_to_hop and len(wave16) % hop:  # vLLM 0.33 Qwen3OmniMoeThinkerMultiModalProcessor._get_hf_mm_inputs
            wave16 = np.pad(wave16, (0, hop - len(wave16) % hop), mode="constant", constant_values=0)
        out, _ = proc._process_audio([wave16], **kwargs)
        feats, mask = out["input_features"][0], out[mask_key][0].bool()
        return feats[:, mask] if keep_masked else feats, int(mask.sum()), int(out["num_audio_tokens"][0])

    call = f"{cls.__name__}._process_audio" + (" after pad_to_hop_length" if pad_to_hop else "")
    return features, _extractor_info(extractor, call + (", the mask's frames" if keep_masked else ", all frames"))


def _ref_qwen3_asr():
    from transformers.models.qwen3_asr import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor

    return _qwen(Qwen3ASRProcessor, Qwen3ASRFeatureExtractor(), "<|audio_pad|>", "input_features_mask", True)


def _ref_qwen3_omni():
    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen3_omni_moe import Qwen3OmniMoeProcessor

    return _qwen(Qwen3OmniMoeProcessor, WhisperFeatureExtractor(**OMNI_EXTRACTOR), "<|audio_pad|>",
                 "feature_attention_mask", True, pad_to_hop=True, n_window=Qwen3OmniMoeProcessor.n_window)


def _ref_qwen2_audio():
    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen2_audio import Qwen2AudioProcessor

    return _qwen(Qwen2AudioProcessor, WhisperFeatureExtractor(**QWEN2_AUDIO_EXTRACTOR), "<|AUDIO|>",
                 "feature_attention_mask", False, sampling_rate=TARGET_SR, truncation=True)


def _ref_qwen2_5_omni():
    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen2_5_omni import Qwen2_5OmniProcessor

    return _qwen(Qwen2_5OmniProcessor, WhisperFeatureExtractor(**dict(OMNI_EXTRACTOR, n_samples=4_800_000)),
                 "<|AUDIO|>", "feature_attention_mask", True)


def _ref_phi4():
    from transformers.models.phi4_multimodal import Phi4MultimodalFeatureExtractor

    fe = Phi4MultimodalFeatureExtractor()

    def features(wave16):
        out = fe([wave16], sampling_rate=TARGET_SR, return_tensors="pt")
        feats = out["audio_input_features"][0]
        return feats, int(feats.shape[0]), int(out["audio_embed_sizes"][0])

    return features, _extractor_info(fe, "Phi4MultimodalFeatureExtractor()([wave])")


@dataclass(frozen=True)
class AudioBench:
    """One family benched: its preset (ours: the family object it builds), its reference
    features (a builder above) and how its features compare (``bins``: int32 bins, equal
    or not; else float log-mel, the largest difference)."""

    key: str
    label: str
    preset: str
    reference: Callable[[], tuple[Callable, dict]]
    bins: bool = False


FAMILIES = {f.key: f for f in (
    AudioBench("inkling", "Inkling", "thinkingmachines/Inkling", _ref_inkling, bins=True),
    AudioBench("qwen3-asr", "Qwen3-ASR", "Qwen/Qwen3-ASR-1.7B-hf", _ref_qwen3_asr),
    AudioBench("qwen3-omni", "Qwen3-Omni", "Qwen/Qwen3-Omni-30B-A3B-Instruct", _ref_qwen3_omni),
    AudioBench("qwen2-audio", "Qwen2-Audio", "Qwen/Qwen2-Audio-7B-Instruct", _ref_qwen2_audio),
    AudioBench("phi4mm", "Phi-4-mm", "microsoft/Phi-4-multimodal-instruct", _ref_phi4),
    AudioBench("qwen2.5-omni", "Qwen2.5-Omni", "Qwen/Qwen2.5-Omni-7B", _ref_qwen2_5_omni),
)}


# -- the reference (its own process, never importing this package) -------------------------


class ReferenceSide:
    """vLLM 0.33's loader and resampler, and one family's HF features."""

    def __init__(self, decode, resample, features):
        self.decode, self.resample, self.features = decode, resample, features

    def whole(self, data: bytes):
        wave, sr = self.decode(data)
        return self.features(self.resample(wave, sr))


def _reply_channel():
    """The real stdout for our replies; anything a library prints (vLLM logs to stdout)
    goes to stderr, which the parent keeps in a log."""
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p != here]
    return os.fdopen(reply_fd, "w", buffering=1)


def reference_main(torch_threads: int | None, families: list[str]) -> None:
    """Answer the parent's JSON lines on stdin, one JSON line each on stdout."""
    out = _reply_channel()
    import torch

    if torch_threads:
        torch.set_num_threads(torch_threads)
    import vllm.multimodal.media.audio as vma
    from vllm.multimodal.audio import AudioResampler, AudioSpec, normalize_audio

    io_ = vma.AudioMediaIO()
    resampler = AudioResampler(target_sr=TARGET_SR, method="torchaudio")
    mono = AudioSpec(target_channels=1)

    def resample(wave, sr):
        return normalize_audio(resampler.resample(wave, orig_sr=sr), mono)

    sides, infos = {}, {}
    for key in families:
        features, infos[key] = FAMILIES[key].reference()
        sides[key] = ReferenceSide(io_.load_bytes, resample, features)
    clips: dict[str, bytes] = {}
    out.write(json.dumps({"ready": True, "versions": _reference_versions(), "families": infos}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "load":  # read the clip, run it once (warm), write its outputs
            data = clips[cmd["name"]] = Path(cmd["path"]).read_bytes()
            reply = _reference_load(sides[cmd["family"]], data, cmd["out_prefix"])
        elif cmd["cmd"] == "round":  # each stage timed apart, then the whole chain
            reply = timed_round(sides[cmd["family"]], clips[cmd["name"]])
        elif cmd["cmd"] == "drop":
            clips.pop(cmd["name"], None)
            reply = {}
        else:
            return
        out.write(json.dumps(reply) + "\n")


def _reference_load(side: ReferenceSide, data: bytes, prefix: str) -> dict:
    """The clip once through every stage (warm), its outputs written at ``prefix``."""
    import numpy as np

    backend = _which_backend(side, data)
    wave, sr = side.decode(data)
    wave16 = side.resample(wave, sr)
    feats, frames, tokens = side.features(wave16)
    side.whole(data)
    np.save(prefix + "wave.npy", np.asarray(wave))
    np.save(prefix + "wave16.npy", np.asarray(wave16))
    np.save(prefix + "features.npy", feats.numpy())
    return {"backend": backend, "sample_rate": sr, "samples": int(len(wave)), "samples16": int(len(wave16)),
            "features_shape": list(feats.shape), "frames": frames, "tokens": tokens}


def _which_backend(side: ReferenceSide, data: bytes) -> str:
    """The loader vLLM's "auto" chain answered with (each is called by its module name)."""
    from unittest import mock

    import vllm.multimodal.media.audio as vma

    used: list[str] = []

    def spy(name, fn):
        def call(*a, **k):
            result = fn(*a, **k)
            used.append(name)
            return result
        return call

    names = {"torchcodec": "load_audio_torchcodec", "soundfile": "load_audio_soundfile", "pyav": "load_audio_pyav"}
    with mock.patch.multiple(vma, **{attr: spy(name, getattr(vma, attr)) for name, attr in names.items()}):
        side.decode(data)
    return used[-1] if used else "?"


def _reference_versions() -> dict:
    import numpy as np
    import torch
    import transformers
    import vllm
    import vllm.multimodal.media.audio as vma

    v = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
         "vllm": vllm.__version__, "transformers": transformers.__version__,
         "transformers_path": str(Path(transformers.__file__).parent),
         "torch_threads": torch.get_num_threads(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
    for name in ("torchaudio", "torchcodec", "soundfile", "av"):
        try:
            v[name] = __import__(name).__version__
        except Exception as e:  # noqa: BLE001  (reported, not needed)
            v[name] = f"unavailable ({type(e).__name__})"
    try:
        from torchcodec._core import get_ffmpeg_library_versions

        v["torchcodec_ffmpeg"] = get_ffmpeg_library_versions().get("ffmpeg_version")
    except Exception:  # noqa: BLE001
        pass
    try:
        import soundfile

        v["libsndfile"] = soundfile.__libsndfile_version__
    except Exception:  # noqa: BLE001
        pass
    try:
        import av

        v["av_ffmpeg"] = getattr(av, "ffmpeg_version_info", None)
    except Exception:  # noqa: BLE001
        pass
    v["vllm_audio_backend_available"] = {"torchcodec": vma.AudioDecoder is not None}
    return v


class Reference:
    """The reference process: JSON lines in and out; its stderr kept in a log file."""

    def __init__(self, python: str, pythonpath: str, torch_threads: int | None, families: list[str], log: Path):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        cmd = [python, str(Path(__file__).resolve()), "--as-reference", "--families", *families]
        if torch_threads:
            cmd += ["--threads", str(torch_threads)]
        self.log = log
        self._log = open(log, "w")  # noqa: SIM115  (closed in close())
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, cwd="/", env=env)
        self._hello: dict | None = None

    @property
    def hello(self) -> dict:
        """Its first line (versions), read when first asked: the processes import in parallel."""
        if self._hello is None:
            self._hello = self._read()
        return self._hello

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(30)
            tail = self.log.read_text().strip().splitlines()[-25:]
            raise SystemExit("the reference process ended (exit %s); its log's end:\n  %s"
                             % (self.proc.returncode, "\n  ".join(tail)))
        return json.loads(line)

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(60)
        finally:
            self._log.close()


# -- ours ------------------------------------------------------------------------------------


class Ours:
    """One family's side: the preset's preprocessor (warm) and, for the features stage, its
    family object as the audio driver calls it."""

    def __init__(self, preset: str):
        from sglang_mm_grpc import Preprocessor
        from sglang_mm_grpc.media import audio as media_audio

        self.media = media_audio
        self.pp = Preprocessor.from_model(preset, cache_bytes=0)
        self.pp.warmup()
        self.family = self.pp.family
        self.cfg = self.family.audio_config()
        self.rate = self.family.sampling_rate(self.cfg)
        if self.rate != TARGET_SR:
            raise SystemExit(f"{preset}: its extractor takes {self.rate} Hz; the reference resamples to {TARGET_SR}")

    def decode(self, data: bytes):
        meta = self.media.probe(data)
        return self.media.decode(data, meta), meta.sample_rate

    def resample(self, wave, sr):
        return self.media.resample(wave, sr, self.rate)

    def features(self, wave16) -> dict:
        plan = self.family.plan_audio(self.cfg, len(wave16), 0)
        return self.family.process_audio(self.cfg, wave16, plan)

    def whole(self, data: bytes):
        return self.pp.preprocess([], audios=[data], use_cache=False)

    def array(self, tensors: dict):
        """The clip's features (the encoder input) as the reference's: one clip's, no batch axis."""
        a = tensors[self.family.audio_features_key]
        return a[0] if a.ndim == 3 else a


def versions_ours() -> dict:
    import av
    import numba
    import numpy as np

    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    return {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "av": av.__version__, "av_ffmpeg": getattr(av, "ffmpeg_version_info", None), "commit": commit,
            "numba_threads": os.environ.get("NUMBA_NUM_THREADS")}


def machine() -> dict:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model, "cores": os.cpu_count(), "usable_cores": usable, "machine": platform.machine(),
            "loadavg_start": list(os.getloadavg())}


# -- the comparison ---------------------------------------------------------------------------


def _waves(a, b) -> str:
    import numpy as np

    if a.shape != b.shape:
        return f"{len(a)} vs {len(b)} samples"
    if np.array_equal(a, b):
        return "equal"
    return f"max |d| {float(np.max(np.abs(a.astype(np.float64) - b))):.1e}"


def _bins_difference(a, b) -> tuple[str, float]:
    """Inkling's bins: how many differ (-1: the shapes do)."""
    import numpy as np

    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}", -1
    n = int(np.count_nonzero(a != b))
    if not n:
        return "equal", 0
    return f"{n} of {a.size} differ (max |d| {int(np.max(np.abs(a.astype(np.int64) - b)))})", n


def _logmel_difference(a, b) -> tuple[str, float]:
    """A log-mel: the largest absolute difference (-1: the shapes differ)."""
    import numpy as np

    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}", -1
    d = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
    return ("equal" if d == 0 else f"max |d| {d:.1e}"), d


def agreement(ours: Ours, bench: AudioBench, data: bytes, prefix: str, loaded: dict) -> dict:
    """Our outputs against the reference's, on the same clip (its files at ``prefix``, its
    counts in ``loaded``): the waves, the end to end call's features, frames and tokens."""
    import numpy as np

    ref_wave, ref_wave16, ref_feats = (np.load(prefix + s) for s in ("wave.npy", "wave16.npy", "features.npy"))
    wave, sr = ours.decode(data)
    wave16 = ours.resample(wave, sr)
    out = ours.whole(data)
    feats, (clip,) = ours.array(out.audio_tensors), out.audios
    compare = _bins_difference if bench.bins else _logmel_difference
    text, difference = compare(feats, ref_feats)
    result = {"decode": _waves(wave, ref_wave), "resample": _waves(wave16, ref_wave16), "features": text,
              "features_difference": difference, "features_total": int(ref_feats.size),
              "frames": loaded["frames"], "tokens": loaded["tokens"], "ours_frames": clip.frames,
              "ours_tokens": clip.token_count,
              "staged_equals_whole": bool(np.array_equal(ours.array(ours.features(wave16)), feats))}
    if difference and result["resample"] != "equal":  # ours on the reference's own 16 kHz wave: the features alone
        result["features_on_reference_wave"] = compare(ours.array(ours.features(ref_wave16)), ref_feats)[0]
    return result


def summarize(rounds: list[dict]) -> dict:
    return {s: {"median": statistics.median(r[s] for r in rounds), "min": min(r[s] for r in rounds)}
            for s in (*STAGES, "e2e_cpu")}


def fmt_ms(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def ratios(ref: dict, ours: dict) -> dict:
    return {s: {k: ref[s][k] / ours[s][k] if ours[s][k] > 0 else None for k in ("median", "min")} for s in STAGES}


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(cells) + " |" for cells in rows])


def table(rows: list[dict], setting: str) -> str:
    """The per-clip table against the reference at one torch-threads setting."""
    head = ["family", "clip", "frames"]
    for s in STAGES:
        head += [f"{STAGE_NAMES[s]}: ours", "reference", "ref / ours"]
    lines = []
    for row in rows:
        cells = [row["family_label"], row["label"], str(row["agreement"]["frames"])]
        ref, rat = row["reference"][setting], row["ratios"][setting]
        for s in STAGES:
            o, r = row["ours"][s], ref[s]
            if s == "resample" and row["native_rate"] == TARGET_SR:
                cells += ["-", "-", "- (at 16 kHz)"]
                continue
            x = f"{rat[s]['median']:.2f}x"
            cells += [f"{fmt_ms(o['median'])} ({fmt_ms(o['min'])})", f"{fmt_ms(r['median'])} ({fmt_ms(r['min'])})",
                      (f"**{x}**" if s == "e2e" else x) + f" ({rat[s]['min']:.2f}x)"]
        lines.append(cells)
    return _markdown(head, lines)


def cpu_table(rows: list[dict], settings: list[str]) -> str:
    head = ["family", "clip", "ours"] + [f"reference, torch {s}" for s in settings]
    return _markdown(head, [[row["family_label"], row["label"], fmt_ms(row["ours"]["e2e_cpu"]["median"])]
                            + [fmt_ms(row["reference"][s]["e2e_cpu"]["median"]) for s in settings] for row in rows])


def _counts(a: dict) -> str:
    if (a["ours_frames"], a["ours_tokens"]) == (a["frames"], a["tokens"]):
        return f"{a['frames']}, {a['tokens']}: equal"
    return f"ours {a['ours_frames']}, {a['ours_tokens']}; reference {a['frames']}, {a['tokens']}"


def agreement_table(rows: list[dict]) -> str:
    head = ["family", "clip", "reference decoder", "decode", "resample", "features (end to end)",
            "frames, tokens"]
    lines = []
    for row in rows:
        a = row["agreement"]
        feats = a["features"] + (f"; ours on the reference's wave: {a['features_on_reference_wave']}"
                                 if "features_on_reference_wave" in a else "")
        if not a["staged_equals_whole"]:
            feats += " (the features stage differs from the end to end call's)"
        resample = "- (at 16 kHz)" if row["native_rate"] == TARGET_SR else a["resample"]
        lines.append([row["family_label"], row["label"], row["reference_backend"], a["decode"], resample, feats,
                      _counts(a)])
    return _markdown(head, lines)


def make_clips(durations: list[float], formats: list[str], clip_dir: Path) -> list[dict]:
    sys.path.insert(0, str(ROOT / "tests"))
    import audiogen

    clips = []
    for seconds in durations:
        for f in formats:
            spec = FORMATS[f]
            name = f"{f}_{spec['rate']}_{spec['channels']}ch_{seconds:g}s"
            path = clip_dir / f"{name}.{spec['ext']}"
            t0 = time.perf_counter()
            if path.exists() and path.stat().st_size:
                made = "reused"
            else:
                path.write_bytes(audiogen.clip(seconds=seconds, rate=spec["rate"], channels=spec["channels"],
                                               fmt=spec["fmt"]))
                made = f"made in {time.perf_counter() - t0:.1f} s"
            dur = f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
            clips.append({"name": name, "path": path, "seconds": seconds, "format": f,
                          "label": f"{dur} {spec['label']}", "native_rate": spec["rate"]})
            print(f"  {path.name}: {path.stat().st_size / 1e6:.2f} MB ({made})", flush=True)
    return clips


def start_references(args, tmp: Path) -> dict[str, Reference]:
    """One reference process per --torch-threads setting, named by the threads it runs
    ("2 threads (default)", "1 thread"); a setting equal to an earlier one is dropped."""
    started = [(setting, Reference(args.reference_python, args.reference_pythonpath,
                                   None if setting == "default" else int(setting), args.families,
                                   tmp / f"reference{i}.log"))
               for i, setting in enumerate(args.torch_threads)]
    refs: dict[str, Reference] = {}
    for setting, ref in started:
        threads = None if setting == "default" else int(setting)
        n = ref.hello["versions"]["torch_threads"]
        name = f"{n} thread{'s' if n != 1 else ''}" + (" (default)" if threads is None else "")
        if any(r.hello["versions"]["torch_threads"] == n for r in refs.values()):
            print(f"  (torch {setting}: {n} threads, as an earlier setting; not run twice)")
            ref.close()
            continue
        refs[name] = ref
    return refs


# -- the run ----------------------------------------------------------------------------------


def bench_clip(ours: Ours, bench: AudioBench, clip: dict, refs: dict[str, Reference], args, tmp: Path) -> dict:
    """One family on one clip: warm, compared, then timed in rotating rounds."""
    data = clip["path"].read_bytes()
    prefix = str(tmp / f"{bench.key}.{clip['name']}.ref_")
    for i, ref in enumerate(refs.values()):  # each reads the clip and runs it once (warm)
        loaded = ref.ask(cmd="load", family=bench.key, name=clip["name"], path=str(clip["path"]), out_prefix=prefix)
        if i == 0:
            backend = loaded["backend"]
            timed_round(ours, data)  # warm
            agree = agreement(ours, bench, data, prefix, loaded)
        for suffix in ("wave.npy", "wave16.npy", "features.npy"):
            Path(prefix + suffix).unlink(missing_ok=True)
    n = args.repeats if clip["seconds"] >= 60 else args.short_repeats
    settings = list(refs)
    sides = ["ours", *settings]
    timed: dict[str, list[dict]] = {side: [] for side in sides}
    for k in range(n):  # one call each in turn, the order rotating every round
        for side in sides[k % len(sides):] + sides[:k % len(sides)]:
            timed[side].append(timed_round(ours, data) if side == "ours"
                               else refs[side].ask(cmd="round", family=bench.key, name=clip["name"]))
    for ref in refs.values():
        ref.ask(cmd="drop", name=clip["name"])
    o = summarize(timed["ours"])
    r = {s: summarize(timed[s]) for s in settings}
    print(f"  {bench.label}, {clip['label']}: {n} rounds; end to end ours {fmt_ms(o['e2e']['median'])} ms, "
          "reference " + ", ".join(f"{fmt_ms(r[s]['e2e']['median'])} ms at {s}" for s in settings)
          + f"; features {agree['features']}", flush=True)
    return {"family": bench.key, "family_label": bench.label, "preset": bench.preset,
            **{k: v for k, v in clip.items() if k != "path"}, "bytes": len(data), "rounds": n, "ours": o,
            "reference": r, "ratios": {s: ratios(r[s], o) for s in settings}, "agreement": agree,
            "reference_backend": backend, "ours_rounds": timed["ours"],
            "reference_rounds": {s: timed[s] for s in settings}}


def run_families(args, clips: list[dict], refs: dict[str, Reference], tmp: Path) -> list[dict]:
    rows = []
    for key in args.families:
        bench = FAMILIES[key]
        t0 = time.perf_counter()
        ours = Ours(bench.preset)
        print(f"{bench.label} ({bench.preset}, our {ours.family.name} family; warm in "
              f"{time.perf_counter() - t0:.1f} s):", flush=True)
        rows += [bench_clip(ours, bench, clip, refs, args, tmp) for clip in clips]
    return rows


def report(rows: list[dict], hello: dict[str, dict], host: dict, ov: dict, tuned, elapsed: float) -> None:
    settings = list(hello)
    rv = next(iter(hello.values()))["versions"]
    print()
    print(f"machine: {host['cpu']}, {host['cores']} cores ({host['usable_cores']} usable), {host['machine']}; "
          f"load average {host['loadavg_start'][0]:.2f} at the start, {host['loadavg_end'][0]:.2f} at the end; "
          f"{elapsed:.0f} s in all")
    print(f"ours: Python {ov['python']}, numpy {ov['numpy']}, numba {ov['numba']} (one thread), PyAV {ov['av']} "
          f"(FFmpeg {ov['av_ffmpeg']}), commit {ov['commit']}; malloc tuned: {tuned}")
    print(f"reference: Python {rv['python']}, vLLM {rv['vllm']}, torch {rv['torch']} ({rv['torch_cpu_capability']}), "
          f"torchaudio {rv['torchaudio']}, torchcodec {rv['torchcodec']} (FFmpeg {rv.get('torchcodec_ffmpeg')}), "
          f"soundfile {rv['soundfile']} ({rv.get('libsndfile')}), PyAV {rv['av']} (FFmpeg {rv.get('av_ffmpeg')}), "
          f"transformers {rv['transformers']} ({rv['transformers_path']}), numpy {rv['numpy']}")
    print(f"reference decoder (vLLM's \"auto\" chain): {', '.join(sorted({row['reference_backend'] for row in rows}))}")
    for key, info in next(iter(hello.values()))["families"].items():
        print(f"reference features, {FAMILIES[key].label}: {info}")
    for s in settings:
        print()
        print(f"reference with torch at {s}: ms, median (min) over the rounds; ratios reference / ours of the "
              "medians (of the minima)")
        print()
        print(table(rows, s))
    for title, text in (("end to end, CPU ms of the whole process (all threads), median:", cpu_table(rows, settings)),
                        ("outputs, ours against the reference on the same clip (frames, tokens: of the end to end "
                         "call's clip):", agreement_table(rows))):
        print()
        print(title)
        print()
        print(text)
    print()
    for key in dict.fromkeys(row["family"] for row in rows):
        for s in settings:
            e2e = [row["ratios"][s]["e2e"]["median"] for row in rows if row["family"] == key]
            print(f"{FAMILIES[key].label}: end to end, reference (torch at {s}) / ours: {min(e2e):.2f}x - "
                  f"{max(e2e):.2f}x; >= 5x on {sum(x >= 5 for x in e2e)} of {len(e2e)} clips")


def parse_args(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES),
                    help="the families to bench, in this order (default all: "
                         + ", ".join(f"{k} = {f.preset}" for k, f in FAMILIES.items()) + ")")
    ap.add_argument("--repeats", type=int, default=7,
                    help="timed rounds of each clip of a minute or more (default 7)")
    ap.add_argument("--short-repeats", type=int, default=25,
                    help="timed rounds of each clip shorter than a minute (default 25)")
    ap.add_argument("--durations", type=float, nargs="+", default=[5.0, 30.0, 300.0],
                    help="clip lengths in seconds (default 5 30 300)")
    ap.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=["mp3", "wav"],
                    help="mp3: 44.1 kHz stereo MP3; wav: 16 kHz mono 16-bit WAV (default both)")
    ap.add_argument("--reference-python", default="/work/vllm-venv/bin/python",
                    help="the reference's interpreter: vLLM 0.33 with torch and torchaudio "
                         "(default /work/vllm-venv/bin/python)")
    ap.add_argument("--reference-pythonpath", default="/work/tf524",
                    help="put first on the reference's path (its PYTHONPATH): where transformers 5.24, the "
                         "fixture scripts' version, is installed (default /work/tf524; '' for none)")
    ap.add_argument("--torch-threads", nargs="+", default=["default", "1"], metavar="N|default",
                    help="one reference process per setting, each timed in the same rounds: 'default' leaves "
                         "torch at its default (the first table), N calls torch.set_num_threads(N) (default: "
                         "default 1; 1 is what vLLM's renderer runs its processors at unless OMP_NUM_THREADS "
                         "is set)")
    ap.add_argument("--clip-dir", help="write the clips here and keep them (reused when present); "
                                       "default: a temporary directory, removed at the end")
    ap.add_argument("--json", help="write the machine, versions, every round and the summary here")
    ap.add_argument("--as-reference", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)  # the reference's torch threads
    args = ap.parse_args(argv)
    args.families = list(dict.fromkeys(args.families))
    if args.as_reference:
        return args
    for setting in args.torch_threads:
        if setting != "default" and not (setting.isdigit() and int(setting) > 0):
            ap.error(f"--torch-threads takes 'default' or a positive count, not {setting!r}")
    if not (os.path.isfile(args.reference_python) and os.access(args.reference_python, os.X_OK)):
        ap.error(f"--reference-python {args.reference_python}: not an executable file")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.as_reference:
        reference_main(args.threads, args.families)
        return 0
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT))
    from sglang_mm_grpc.server.allocator import tune_for_large_tensors

    tuned = tune_for_large_tensors()  # as serve runs (freed buffers reused, not faulted in afresh)
    host = machine()
    tmp = Path(tempfile.mkdtemp(prefix="bench_audio_"))
    clip_dir = Path(args.clip_dir) if args.clip_dir else tmp
    clip_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    refs: dict[str, Reference] = {}
    try:
        print("clips (tests/audiogen.py clip(...)):", flush=True)
        clips = make_clips(args.durations, args.formats, clip_dir)
        refs = start_references(args, tmp)
        rows = run_families(args, clips, refs, tmp)
        hello = {s: ref.hello for s, ref in refs.items()}
    finally:
        for ref in refs.values():
            ref.close()
        shutil.rmtree(tmp, ignore_errors=True)
    host["loadavg_end"] = list(os.getloadavg())
    elapsed = time.perf_counter() - started
    ov = versions_ours()
    report(rows, hello, host, ov, tuned, elapsed)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": host, "ours_versions": ov,
            "reference_versions": {s: h["versions"] for s, h in hello.items()},
            "reference_families": next(iter(hello.values()))["families"],
            "reference_backend": {row["name"]: row["reference_backend"] for row in rows},
            "malloc_tuned": tuned, "elapsed_s": elapsed,
            "args": {k: v for k, v in vars(args).items() if k not in ("as_reference", "threads")},
            "clips": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
