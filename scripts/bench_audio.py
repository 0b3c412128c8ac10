#!/usr/bin/env python3
"""Audio bench (Inkling): ours against vLLM 0.33's loader and resampler with HF's Inkling
features, per clip and per stage, side by side in one run.

    .venv/bin/python scripts/bench_audio.py [--repeats 7] [--short-repeats 25]
        [--reference-python /work/vllm-venv/bin/python] [--reference-pythonpath /work/tf524]
        [--torch-threads default 1] [--durations 5 30 300] [--formats mp3 wav] [--clip-dir DIR]
        [--json out.json]

Clips (``tests/audiogen.py`` ``clip(...)``: a few tones per channel and seeded noise):
``mp3`` 44.1 kHz stereo MP3 (libmp3lame at its default bitrate) and ``wav`` 16 kHz mono
16-bit WAV, each ``--durations`` seconds long (5 s, 30 s and 5 min by default).

Ours, in this process (one thread, malloc tuned as ``serve`` tunes it):

* decode: ``media.audio.probe`` + ``media.audio.decode`` (bytes -> float32 mono at the
  clip's rate);
* resample: ``media.audio.resample`` to 16 kHz (a no-op at 16 kHz);
* features: ``families.inkling.audio.dmel`` (the int32 dMel bins);
* end to end: ``Preprocessor.from_model("thinkingmachines/Inkling", cache_bytes=0)
  .preprocess([], audios=[clip], use_cache=False)``: the whole call (hash, header,
  decode, resample, plan, layout, bins); no cache can answer.

The reference, in a process of its own (``--reference-python``, a venv with vLLM, torch and
torchaudio; ``--reference-pythonpath`` put first on its path, where transformers 5.24 with
the Inkling classes lives) that never imports this package, the clip's bytes in memory:

* decode: ``vllm.multimodal.media.audio.AudioMediaIO().load_bytes(data)`` (``load_audio``
  at the native rate with its default "auto" backend chain: torchcodec, then soundfile,
  then PyAV; the backend that answered is printed);
* resample: ``vllm.multimodal.audio.AudioResampler(16000, method="torchaudio")`` and
  ``normalize_audio`` to mono, as the multimodal parser calls them (torchaudio's
  ``Resample``, which vLLM runs at one thread with oneDNN off);
* features: ``InklingFeatureExtractor()([wave], sampling_rate=16000,
  return_tensors="pt")``, ``InklingProcessor._extract_dmel_bins`` and ``ids[:n]`` joined,
  as vLLM's Inkling processor does (both at the transformers classes' defaults, which are
  the preset's);
* end to end: the three in a row.

Torch threads (``--torch-threads``): one reference process per setting, all timed in the
same rounds. ``default`` (the first table) leaves torch at its default, as a plain HF user
has it (all cores: printed); ``1`` is what vLLM itself runs the processor at (its renderer
calls ``mm_processor.apply`` inside ``set_default_torch_num_threads()``: OMP_NUM_THREADS,
else 1). On a machine whose cores other work is using, torch's OpenMP threads can wait on
each other for tens of milliseconds a call (wall time far above one thread's, CPU time
too); the CPU table shows it.

Each stage is timed apart (wall clock), and the end to end as a whole call of its own
(also its process CPU time, all threads). Every clip is run once untimed on every side
first (warm); then one call on each side in turn, the order rotating every round, so a
slow stretch of a shared machine lands on all of them; medians and minima over
``--repeats`` rounds for clips of a minute or more, ``--short-repeats`` for shorter ones.
Ratios are reference / ours (above 1: ours is faster), of the medians (of the minima in
parentheses).

The outputs are compared on every clip: the decoded and the resampled waves (equal, or the
largest difference) and the bins (equal, or how many of them differ: the reference's
float32 FFT can flip a bin where a band sits right on a bin boundary, e.g. on pure tones;
where they differ, ours on the reference's own 16 kHz wave is compared too). Nothing is
asserted about the times. ``--json`` writes every round.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "thinkingmachines/Inkling"
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


# -- the reference (its own process, never importing this package) -------------------------


def reference_main(torch_threads: int | None) -> None:
    """Answer the parent's JSON lines on stdin, one JSON line each on stdout."""
    # Our replies get the real stdout; anything a library prints (vLLM logs to stdout)
    # goes to stderr, which the parent keeps in a log.
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = os.fdopen(reply_fd, "w", buffering=1)
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p != here]

    from unittest import mock

    import numpy as np
    import torch

    if torch_threads:
        torch.set_num_threads(torch_threads)
    import transformers
    import vllm
    import vllm.multimodal.media.audio as vma
    from transformers.models.inkling import InklingFeatureExtractor, InklingProcessor
    from transformers.processing_utils import ProcessorMixin
    from vllm.multimodal.audio import AudioResampler, AudioSpec, normalize_audio

    class _Tokenizer:  # the processor's __init__ reads two token ids; the bins use neither
        def encode(self, text, add_special_tokens=False):
            return [0]

    io_ = vma.AudioMediaIO()
    resampler = AudioResampler(target_sr=TARGET_SR, method="torchaudio")
    mono = AudioSpec(target_channels=1)
    fe = InklingFeatureExtractor()
    with mock.patch.object(ProcessorMixin, "__init__", lambda *a, **k: None):
        proc = InklingProcessor(tokenizer=_Tokenizer())  # its real __init__ (bin centers)

    def decode(data):
        return io_.load_bytes(data)

    def resample(wave, sr):
        return normalize_audio(resampler.resample(wave, orig_sr=sr), mono)

    def features(wave16):
        feats = fe([wave16], sampling_rate=fe.sampling_rate, return_tensors="pt")
        ids = proc._extract_dmel_bins(feats["input_features"])
        counts = feats["input_features_mask"].sum(-1)
        return torch.cat([x[:n] for x, n in zip(ids, counts.tolist())])

    def whole(data):
        wave, sr = decode(data)
        return features(resample(wave, sr))

    def versions() -> dict:
        v = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
             "vllm": vllm.__version__, "transformers": transformers.__version__,
             "transformers_path": str(Path(transformers.__file__).parent),
             "torch_threads": torch.get_num_threads(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
             "feature_extractor": {"hop": fe.hop_length, "window": fe.window_size, "n_fft": fe.n_fft,
                                   "feature_size": fe.feature_size, "sampling_rate": fe.sampling_rate},
             "processor": {"num_dmel_bins": proc.num_dmel_bins, "dmel_min_value": proc.dmel_min_value,
                           "dmel_max_value": proc.dmel_max_value}}
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

    def which_backend(data) -> str:
        """The loader the "auto" chain answered with (each is called by its module name)."""
        used: list[str] = []

        def spy(name, fn):
            def call(*a, **k):
                result = fn(*a, **k)
                used.append(name)
                return result
            return call

        names = {"torchcodec": "load_audio_torchcodec", "soundfile": "load_audio_soundfile", "pyav": "load_audio_pyav"}
        with mock.patch.multiple(vma, **{attr: spy(name, getattr(vma, attr)) for name, attr in names.items()}):
            decode(data)
        return used[-1] if used else "?"

    clips: dict[str, bytes] = {}
    out.write(json.dumps({"ready": True, "versions": versions()}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "load":  # read the clip, run it once (warm), write its outputs
            data = clips[cmd["name"]] = Path(cmd["path"]).read_bytes()
            backend = which_backend(data)
            wave, sr = decode(data)
            wave16 = resample(wave, sr)
            bins = features(wave16)
            whole(data)
            prefix = cmd["out_prefix"]
            np.save(prefix + "wave.npy", np.asarray(wave))
            np.save(prefix + "wave16.npy", np.asarray(wave16))
            np.save(prefix + "bins.npy", bins.numpy())
            reply = {"backend": backend, "sample_rate": sr, "samples": int(len(wave)),
                     "samples16": int(len(wave16)), "bins_shape": list(bins.shape)}
        elif cmd["cmd"] == "round":  # each stage timed apart, then the whole chain
            data = clips[cmd["name"]]
            t0 = time.perf_counter()
            wave, sr = decode(data)
            decode_ms = _ms(t0)
            t0 = time.perf_counter()
            wave16 = resample(wave, sr)
            resample_ms = _ms(t0)
            t0 = time.perf_counter()
            features(wave16)
            features_ms = _ms(t0)
            del wave, wave16
            t0, c0 = time.perf_counter(), time.process_time()
            whole(data)
            reply = {"decode": decode_ms, "resample": resample_ms, "features": features_ms, "e2e": _ms(t0),
                     "e2e_cpu": (time.process_time() - c0) * 1e3}
        elif cmd["cmd"] == "drop":
            clips.pop(cmd["name"], None)
            reply = {}
        else:
            return
        out.write(json.dumps(reply) + "\n")


class Reference:
    """The reference process: JSON lines in and out; its stderr kept in a log file."""

    def __init__(self, python: str, pythonpath: str, torch_threads: int | None, log: Path):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        cmd = [python, str(Path(__file__).resolve()), "--as-reference"]
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
    def __init__(self):
        from sglang_mm_grpc import Preprocessor
        from sglang_mm_grpc.families.inkling import audio as inkling_audio
        from sglang_mm_grpc.media import audio as media_audio

        self.media, self.inkling = media_audio, inkling_audio
        self.pp = Preprocessor.from_model(MODEL, cache_bytes=0)
        self.pp.warmup()
        self.rate = self.pp.family.sampling_rate(self.pp.family.audio_config())

    def decode(self, data: bytes):
        meta = self.media.probe(data)
        return self.media.decode(data, meta), meta.sample_rate

    def resample(self, wave, sr):
        return self.media.resample(wave, sr, self.rate)

    def features(self, wave16):
        return self.inkling.dmel(wave16)

    def whole(self, data: bytes):
        return self.pp.preprocess([], audios=[data], use_cache=False).audio_tensors["input_audio_features"]

    def round(self, data: bytes) -> dict:
        t0 = time.perf_counter()
        wave, sr = self.decode(data)
        decode_ms = _ms(t0)
        t0 = time.perf_counter()
        wave16 = self.resample(wave, sr)
        resample_ms = _ms(t0)
        t0 = time.perf_counter()
        self.features(wave16)
        features_ms = _ms(t0)
        del wave, wave16
        t0, c0 = time.perf_counter(), time.process_time()
        self.whole(data)
        return {"decode": decode_ms, "resample": resample_ms, "features": features_ms, "e2e": _ms(t0),
                "e2e_cpu": (time.process_time() - c0) * 1e3}


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


def agreement(ours: Ours, data: bytes, prefix: str) -> dict:
    """Our outputs against the reference's, on the same clip (its files at ``prefix``)."""
    import numpy as np

    ref_wave, ref_wave16 = np.load(prefix + "wave.npy"), np.load(prefix + "wave16.npy")
    ref_bins = np.load(prefix + "bins.npy")
    wave, sr = ours.decode(data)
    wave16 = ours.resample(wave, sr)
    bins = ours.whole(data)
    staged = ours.features(wave16)

    def waves(a, b) -> str:
        if a.shape != b.shape:
            return f"{len(a)} vs {len(b)} samples"
        if np.array_equal(a, b):
            return "equal"
        return f"max |d| {float(np.max(np.abs(a.astype(np.float64) - b))):.1e}"

    def count(a, b) -> tuple[str, int]:
        if a.shape != b.shape:
            return f"shape {a.shape} vs {b.shape}", -1
        n = int(np.count_nonzero(a != b))
        if not n:
            return "equal", 0
        return f"{n} of {a.size} differ (max |d| {int(np.max(np.abs(a.astype(np.int64) - b)))})", n

    bins_text, differing = count(bins, ref_bins)
    result = {"decode": waves(wave, ref_wave), "resample": waves(wave16, ref_wave16), "bins": bins_text,
              "bins_differing": differing, "bins_total": int(ref_bins.size), "frames": int(ref_bins.shape[0]),
              "staged_equals_whole": bool(np.array_equal(staged, bins))}
    if differing:  # ours on the reference's own 16 kHz wave: the features alone
        result["bins_on_reference_wave"] = count(ours.features(ref_wave16), ref_bins)[0]
    return result


def summarize(rounds: list[dict]) -> dict:
    return {s: {"median": statistics.median(r[s] for r in rounds), "min": min(r[s] for r in rounds)}
            for s in (*STAGES, "e2e_cpu")}


def fmt_ms(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def ratios(ref: dict, ours: dict) -> dict:
    return {s: {k: ref[s][k] / ours[s][k] if ours[s][k] > 0 else None for k in ("median", "min")} for s in STAGES}


def table(rows: list[dict], setting: str) -> str:
    """The per-clip table against the reference at one torch-threads setting."""
    head = ["clip", "frames"]
    for s in STAGES:
        head += [f"{STAGE_NAMES[s]}: ours", "reference", "ref / ours"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["label"], str(row["agreement"]["frames"])]
        ref, rat = row["reference"][setting], row["ratios"][setting]
        for s in STAGES:
            o, r = row["ours"][s], ref[s]
            if s == "resample" and row["native_rate"] == TARGET_SR:
                cells += ["-", "-", "- (at 16 kHz)"]
                continue
            x = f"{rat[s]['median']:.2f}x"
            cells += [f"{fmt_ms(o['median'])} ({fmt_ms(o['min'])})", f"{fmt_ms(r['median'])} ({fmt_ms(r['min'])})",
                      (f"**{x}**" if s == "e2e" else x) + f" ({rat[s]['min']:.2f}x)"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(rows: list[dict], settings: list[str]) -> str:
    head = ["clip", "ours"] + [f"reference, torch {s}" for s in settings]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["label"], fmt_ms(row["ours"]["e2e_cpu"]["median"])]
        cells += [fmt_ms(row["reference"][s]["e2e_cpu"]["median"]) for s in settings]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def agreement_table(rows: list[dict], backend_of: dict) -> str:
    lines = ["| clip | reference decoder | decode | resample | bins (end to end) |", "|---|---|---|---|---|"]
    for row in rows:
        a = row["agreement"]
        bins = a["bins"] + (f"; ours on the reference's wave: {a['bins_on_reference_wave']}"
                            if "bins_on_reference_wave" in a else "")
        resample = "- (at 16 kHz)" if row["native_rate"] == TARGET_SR else a["resample"]
        lines.append(f"| {row['label']} | {backend_of[row['name']]} | {a['decode']} | {resample} | {bins} |")
    return "\n".join(lines)


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
                                   None if setting == "default" else int(setting), tmp / f"reference{i}.log"))
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
                    help="put first on the reference's path (its PYTHONPATH): where transformers 5.24, with "
                         "the Inkling classes, is installed (default /work/tf524; '' for none)")
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
    if args.as_reference:
        reference_main(args.threads)
        return 0
    for setting in args.torch_threads:
        if setting != "default" and not (setting.isdigit() and int(setting) > 0):
            ap.error(f"--torch-threads takes 'default' or a positive count, not {setting!r}")
    if not (os.path.isfile(args.reference_python) and os.access(args.reference_python, os.X_OK)):
        ap.error(f"--reference-python {args.reference_python}: not an executable file")

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
        settings = list(refs)
        ours = Ours()
        rv, ov = next(iter(refs.values())).hello["versions"], versions_ours()
        rows, backend_of = [], {}
        for clip in clips:
            data = clip["path"].read_bytes()
            prefix = str(tmp / (clip["name"] + ".ref_"))
            for i, ref in enumerate(refs.values()):  # each reads the clip and runs it once (warm)
                loaded = ref.ask(cmd="load", name=clip["name"], path=str(clip["path"]), out_prefix=prefix)
                if i == 0:
                    backend_of[clip["name"]] = loaded["backend"]
                    ours.round(data)  # warm
                    agree = agreement(ours, data, prefix)
                for suffix in ("wave.npy", "wave16.npy", "bins.npy"):
                    Path(prefix + suffix).unlink(missing_ok=True)
            n = args.repeats if clip["seconds"] >= 60 else args.short_repeats
            sides = ["ours", *settings]
            timed: dict[str, list[dict]] = {side: [] for side in sides}
            for k in range(n):  # one call each in turn, the order rotating every round
                for side in sides[k % len(sides):] + sides[:k % len(sides)]:
                    timed[side].append(ours.round(data) if side == "ours"
                                       else refs[side].ask(cmd="round", name=clip["name"]))
            for ref in refs.values():
                ref.ask(cmd="drop", name=clip["name"])
            o = summarize(timed["ours"])
            r = {s: summarize(timed[s]) for s in settings}
            rows.append({**{k: v for k, v in clip.items() if k != "path"}, "bytes": len(data), "rounds": n,
                         "ours": o, "reference": r, "ratios": {s: ratios(r[s], o) for s in settings},
                         "agreement": agree, "ours_rounds": timed["ours"],
                         "reference_rounds": {s: timed[s] for s in settings}})
            print(f"  {clip['label']}: {n} rounds; end to end ours {fmt_ms(o['e2e']['median'])} ms, reference "
                  + ", ".join(f"{fmt_ms(r[s]['e2e']['median'])} ms at {s}" for s in settings)
                  + f"; bins {agree['bins']}", flush=True)
    finally:
        for ref in refs.values():
            ref.close()
        shutil.rmtree(tmp, ignore_errors=True)
    host["loadavg_end"] = list(os.getloadavg())
    elapsed = time.perf_counter() - started

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
    print(f"reference decoder (vLLM's \"auto\" chain): {', '.join(sorted(set(backend_of.values())))}; "
          f"the extractor {rv['feature_extractor']}, the processor {rv['processor']}")
    for s in settings:
        print()
        print(f"reference with torch at {s}: ms, median (min) over the rounds; ratios reference / ours of the "
              "medians (of the minima)")
        print()
        print(table(rows, s))
    print()
    print("end to end, CPU ms of the whole process (all threads), median:")
    print()
    print(cpu_table(rows, settings))
    print()
    print("outputs, ours against the reference on the same clip:")
    print()
    print(agreement_table(rows, backend_of))
    print()
    for s in settings:
        e2e = [row["ratios"][s]["e2e"]["median"] for row in rows]
        print(f"end to end, reference (torch at {s}) / ours: {min(e2e):.2f}x - {max(e2e):.2f}x; "
              f">= 5x on {sum(x >= 5 for x in e2e)} of {len(e2e)} clips")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": host, "ours_versions": ov,
            "reference_versions": {s: refs[s].hello["versions"] for s in settings},
            "reference_backend": backend_of, "malloc_tuned": tuned, "elapsed_s": elapsed,
            "args": {k: v for k, v in vars(args).items() if k not in ("as_reference", "threads")},
            "clips": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
