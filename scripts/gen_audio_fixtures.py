"""vLLM 0.33.0's decoded waveforms and torchaudio's resampled outputs, for tests/audio.

    /path/to/vllm-venv/bin/python scripts/gen_audio_fixtures.py [--out tests/audio/fixtures/decode.npz]

Run it in a venv with vLLM 0.33.0, its torch, torchaudio and torchcodec, and the
``audio`` extra's decoders (``pip install 'vllm[audio]==0.33.0'``: PyAV, soundfile); it
imports tests/audiogen.py from this repository to make the clips (with that venv's PyAV).

Decoding. vLLM's ``AudioMediaIO`` loads a clip with
``vllm.multimodal.media.audio.load_audio(BytesIO, sr=None, max_duration_s=600,
max_decode_bytes=256 MiB, backend=None)``, whose "auto" backend is torchcodec when it
loads (it needs a system FFmpeg 4-9), else soundfile, else PyAV. This script stores,
per clip, the encoded bytes and what both of vLLM's chains make of them:

* ``<clip>/torchcodec``: ``load_audio`` with the torchcodec backend (skipped, and said so in
  the manifest, when torchcodec cannot load here);
* ``<clip>/fallback``: ``load_audio`` "auto" with torchcodec made unavailable
  (``AudioDecoder = None``, as when no system FFmpeg is installed): soundfile where
  libsndfile opens the file, else PyAV; stored only where it differs from torchcodec's
  (the manifest says which backend served it and whether it equals torchcodec's).

Resampling. ``vllm.multimodal.audio.AudioResampler(target_sr, method="torchaudio")``
(vLLM's default: ``torchaudio.transforms.Resample``, float32, 1 thread, mkldnn off) on

* ``noise/<orig>_<new>_<n>``: ``audiogen.noise(n)`` (integer arithmetic, so the tests
  rebuild the input exactly) at several lengths: plenty of output frames, a few, one;
* ``real/<clip>_<new>``: the clip's torchcodec wave.

``meta`` (a JSON string) also holds the sha256 of torchaudio's kernel
(``transforms.Resample(orig, new).kernel``, float32) for every pair of common rates, and
torchaudio's output length (``ceil(as_tensor(new * n / orig))``, in float32) for lengths
where that float32 rounding loses the exact ceiling. It holds the versions, the CPU (torch's conv1d lowers to MKL's sgemm,
whose summation order is the CPU's), each clip's parameters, rates and backends.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import audiogen  # noqa: E402

#: name -> audiogen.clip arguments (seconds, rate, channels, fmt, seed); "libvorbis": made
#: with soundfile (libvorbis), the encoder most Ogg Vorbis files come from.
CLIPS = {
    "wav_s16_1ch": (0.5, 16000, 1, "wav_s16", 1),
    "wav_s32_2ch": (0.2, 16000, 2, "wav_s32", 2),
    "wav_f32_3ch": (0.15, 16000, 3, "wav_f32", 3),
    "flac_2ch": (0.5, 16000, 2, "flac", 4),
    "mp3_2ch": (0.5, 16000, 2, "mp3", 5),
    "mp3_1ch_22k": (0.5, 22050, 1, "mp3", 6),
    "opus_1ch_16k": (0.5, 16000, 1, "opus", 7),
    "opus_2ch_48k": (0.25, 48000, 2, "opus", 8),
    "vorbis_2ch": (0.5, 16000, 2, "vorbis", 9),
    "libvorbis_1ch": (0.5, 16000, 1, "libvorbis", 10),
    "aac_2ch": (0.5, 16000, 2, "aac", 11),
}

#: (orig, new, input lengths): lengths with many output frames (MKL's fused path), a few
#: (its plain path) and one.
NOISE = [
    (44100, 16000, (8820, 2210, 300)),
    (48000, 16000, (9600,)),
    (22050, 16000, (4410, 1550)),
    (11025, 16000, (2205, 3000)),
    (8000, 16000, (1600,)),
    (16000, 24000, (3200,)),
    (32000, 16000, (6400,)),
    (24000, 16000, (4800,)),
]

#: clip -> the rate its torchcodec wave is resampled to
REAL = {"mp3_1ch_22k": 16000, "opus_2ch_48k": 16000, "aac_2ch": 24000, "wav_s32_2ch": 22050}


def make_clip(args) -> bytes:
    seconds, rate, channels, fmt, seed = args
    if fmt != "libvorbis":
        return audiogen.clip(seconds, rate, channels, fmt, seed=seed)
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, audiogen.signal(seconds, rate, channels, seed).T, rate, format="OGG", subtype="VORBIS")
    return buf.getvalue()


def _load(media, data: bytes, backend: str):
    return media.load_audio(io.BytesIO(data), sr=None, max_duration_s=600, max_decode_bytes=256 << 20,
                            backend=backend)


def fallback(media, data: bytes):
    """vLLM's "auto" chain as it runs without torchcodec, and the backend that served it."""
    import soundfile

    saved = media.AudioDecoder
    media.AudioDecoder = None
    try:
        wave, rate = _load(media, data, "auto")
    finally:
        media.AudioDecoder = saved
    try:
        soundfile.info(io.BytesIO(data))
        served = "soundfile"
    except Exception:  # noqa: BLE001  (libsndfile cannot open it: the chain went on to PyAV)
        served = "pyav"
    return wave, rate, served


def decode_fixtures(out: dict, meta: dict) -> dict[str, np.ndarray]:
    from vllm.multimodal.media import audio as media

    waves = {}
    for name, args in CLIPS.items():
        data = make_clip(args)
        out[f"{name}/bytes"] = np.frombuffer(data, np.uint8)
        entry = {"args": list(args), "bytes": len(data)}
        try:
            wave, rate = _load(media, data, "torchcodec")
            out[f"{name}/torchcodec"] = wave.astype(np.float32)
            entry["torchcodec_rate"] = int(rate)
            waves[name] = (wave, int(rate))
        except ImportError as e:
            entry["torchcodec"] = f"unavailable: {e}"
        fb, rate, served = fallback(media, data)
        entry.update(fallback_rate=int(rate), fallback_backend=served)
        same = name in waves and waves[name][0].shape == fb.shape and np.array_equal(waves[name][0], fb)
        entry["fallback_equals_torchcodec"] = bool(same)
        if not same:
            out[f"{name}/fallback"] = fb.astype(np.float32)
        meta["clips"][name] = entry
        print(name, entry)
    return waves


def resample_fixtures(out: dict, meta: dict, waves: dict) -> None:
    from vllm.multimodal.audio import AudioResampler

    for orig, new, lengths in NOISE:
        for n in lengths:
            out[f"noise/{orig}_{new}_{n}"] = AudioResampler(new, method="torchaudio").resample(audiogen.noise(n), orig_sr=orig)
    for name, new in REAL.items():
        if name in waves:
            wave, rate = waves[name]
            out[f"real/{name}_{new}"] = AudioResampler(new, method="torchaudio").resample(wave, orig_sr=rate)
    meta["noise"] = [[o, n, list(ls)] for o, n, ls in NOISE]
    meta["noise_sha256"] = {str(n): hashlib.sha256(audiogen.noise(n).tobytes()).hexdigest()
                            for _, _, ls in NOISE for n in ls}
    meta["real"] = REAL
    meta["kernels"] = kernel_digests()
    meta["lengths"] = torch_lengths()


#: Rates the kernels' digests are taken for (every ordered pair of them).
RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 88200, 96000, 192000, 7350)


def kernel_digests() -> dict[str, str]:
    import torchaudio

    return {f"{a}_{b}": hashlib.sha256(torchaudio.transforms.Resample(a, b).kernel.numpy().tobytes()).hexdigest()
            for a in RATES for b in RATES if a != b}


def torch_lengths() -> list[list[int]]:
    """[orig, new, n, torchaudio's length] for lengths whose ``new * n / orig`` (reduced
    rates) is just over an integer and large enough that float32 rounds it down."""
    import math

    import torch

    rows = []
    for orig, new in ((44100, 16000), (22050, 16000), (48000, 16000), (16000, 24000)):
        g = math.gcd(orig, new)
        o, n = orig // g, new // g
        for target in (1_000_000, 4_000_000, 9_000_000, 16_000_000, 30_000_000):
            first = -(-target * o // n)  # the smallest input making at least ``target`` samples
            just_over = next(k for k in range(first, first + o + 1) if (n * k) % o == 1 % o)
            for length in sorted({first, just_over, just_over + 1}):
                got = int(torch.ceil(torch.as_tensor(n * length / o)).long())
                rows.append([orig, new, length, got])
    return rows


def versions() -> dict:
    import av
    import soundfile
    import torch
    import torchaudio
    import vllm

    v = {"vllm": vllm.__version__, "torch": torch.__version__, "torchaudio": torchaudio.__version__,
         "numpy": np.__version__, "av": av.__version__, "av_ffmpeg": av.ffmpeg_version_info,
         "soundfile": soundfile.__version__, "libsndfile": soundfile.__libsndfile_version__,
         "machine": platform.machine(), "cpu": _cpu(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        import torchcodec
        from torchcodec import _core

        v.update(torchcodec=torchcodec.__version__, torchcodec_ffmpeg=_core.get_ffmpeg_library_versions())
    except Exception as e:  # noqa: BLE001
        v["torchcodec"] = f"unavailable: {e}"
    return v


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "audio" / "fixtures" / "decode.npz")
    args = parser.parse_args()
    out: dict[str, np.ndarray] = {}
    meta: dict = {"script": "scripts/gen_audio_fixtures.py", "versions": versions(), "clips": {}}
    waves = decode_fixtures(out, meta)
    resample_fixtures(out, meta, waves)
    out["meta"] = np.array(json.dumps(meta, sort_keys=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **out)
    print(f"{args.out}: {args.out.stat().st_size} bytes, {len(out)} arrays")
    print(json.dumps(meta["versions"], indent=1))


if __name__ == "__main__":
    main()
