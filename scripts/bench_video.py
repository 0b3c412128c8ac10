#!/usr/bin/env python3
"""Video bench: a 10 s 1280x720 H.264 (or HEVC) clip, Qwen2-VL's preset, ours vs HF, one call each in turn.

    .venv/bin/python scripts/bench_video.py [--rounds 7] [--fps 2] [--hf-python /root/torchvenv/bin/python]

Ours: ``Preprocessor.preprocess`` (decode of the sampled frames + processing, cache off),
in this process with malloc tuned as the server tunes it (``server.allocator``: freed tensors are
reused instead of faulted in afresh). HF: ``load_video(path, backend="pyav", sample_indices_fn=<the processor's
sample_frames>)`` then ``Qwen2VLVideoProcessor`` (torchvision backend, torch at one thread)
with the preset's sizes, in a process of its own (this file with ``--hf``) that never imports
this package. Sampling: Qwen2-VL's processor takes every frame unless asked (``do_sample_frames``
false), 150 temporal groups of 728x1288 for this clip, 179400 tokens, over its context; both
sides sample at ``--fps`` (2, qwen-vl-utils' default) instead. The decode of only the sampled
frames is timed apart on each side (ours: ``media.video.frames``; HF: ``load_video``). The
outputs are checked equal (sha256 of pixel_values_videos) before timing. Prints medians and
ratios, and writes JSON with ``--json``. Wall time, this thread's CPU time and the CPU time of
all the process's threads (the decoder's own threads included; what load from other work on
a shared machine does not inflate) are recorded on both sides.

Threads: HF's loader leaves the decoder at PyAV's defaults (``thread_type`` SLICE,
``thread_count`` 0 = FFmpeg's choice); the HF process reports what its stream had, and the
headline rows decode ours with the same. Extra rows, not the headline: ours decoding every
frame up to the last sampled one (``sequential``, as HF does; what the packet index buys),
without skipping unreferenced frames (``skip_nonref`` off), and with frame threads
(``thread_type`` AUTO), end to end and decode alone. The frames each decode returns are counted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "Qwen/Qwen2-VL-7B-Instruct"
MIN_PIXELS, MAX_PIXELS = 3136, 12845056  # the preset's (preprocessor_config.json, the video processor's fallback)


#: The clip's encoding. "x264-defaults" (the default): mild noise, x264's own defaults
#: (preset medium: B-frames, keyframes at most every 250 frames), what most encoders hand
#: out. "noisy": strong sensor noise, x264 veryfast, a keyframe every 2 s: x264 then makes
#: almost every frame a reference, so little decoding can be skipped (the hard case, where
#: decode alone is a third of HF's whole call). "x265-defaults": the same scene as HEVC at
#: x265's own defaults (open GOPs: only the first frame starts a decode).
ENCODINGS = {
    "noisy": dict(noise=6.0, crf=23, gop=60),
    "x264-defaults": dict(noise=2.0, crf=23, x264={"preset": "medium"}),
    "x265-defaults": dict(noise=2.0, crf=23, codec="hevc"),
}


def make_clip(path: Path, encoding: str) -> bytes:
    sys.path.insert(0, str(ROOT / "tests"))
    import videogen

    data = videogen.clip(frames=300, fps=30, size=(720, 1280), **ENCODINGS[encoding])
    path.write_bytes(data)
    return data


# -- the HF side (its own process) ----------------------------------------------------------


def hf_main(path: str, fps: float) -> None:
    import functools

    import numpy as np
    import torch
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.video_utils import load_video

    import av

    torch.set_num_threads(1)
    with av.open(path) as c:  # what read_video_pyav's container.decode(video=0) runs with
        s = c.streams.video[0]
        threads = {"thread_type": str(s.thread_type), "thread_count": s.thread_count,
                   "codec_context.thread_type": str(s.codec_context.thread_type)}
    proc = Qwen2VLVideoProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    sample = functools.partial(proc.sample_frames, fps=fps)

    def decode():
        return load_video(path, backend="pyav", sample_indices_fn=sample)

    def call():
        frames, meta = decode()
        out = proc(videos=[frames], video_metadata=[meta], do_sample_frames=False, return_tensors="pt",
                   cap_pixels_per_frame=False)
        return out["pixel_values_videos"]

    for line in sys.stdin:
        cmd = line.strip()
        t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        if cmd == "check":
            pv = call().numpy()
            reply = {"sha256": hashlib.sha256(np.ascontiguousarray(pv).tobytes()).hexdigest(), "shape": pv.shape,
                     "threads": threads}
        elif cmd in ("call", "decode"):
            call() if cmd == "call" else decode()
            reply = {"ms": (time.perf_counter() - t0) * 1e3, "cpu_ms": (time.thread_time() - c0) * 1e3,
                     "all_threads_cpu_ms": (time.process_time() - p0) * 1e3}
        else:
            return
        print(json.dumps(reply), flush=True)


# -- ours -------------------------------------------------------------------------------------

def report(rows: dict, frames_returned: dict, json_path: str | None, malloc_tuned: bool) -> None:
    import os

    med = {k: statistics.median(x) for k, x in rows.items()}
    med["ratio_end_to_end"] = med["hf_ms"] / med["ours_ms"]
    med["ratio_decode"] = med["hf_decode_ms"] / med["ours_decode_ms"]
    med["ours_process_ms"] = med["ours_ms"] - med["ours_decode_ms"]
    med["hf_process_ms"] = med["hf_ms"] - med["hf_decode_ms"]
    med["ratio_process"] = med["hf_process_ms"] / med["ours_process_ms"]
    med["ratio_all_threads_cpu"] = med["hf_all_threads_cpu_ms"] / med["ours_all_threads_cpu_ms"]
    med["ratio_decode_all_threads_cpu"] = med["hf_decode_all_threads_cpu_ms"] / med["ours_decode_all_threads_cpu_ms"]
    med["ratio_end_to_end_frame_threads"] = med["hf_ms"] / med["ours_frame_threads_ms"]
    med["ratio_decode_frame_threads"] = med["hf_decode_ms"] / med["ours_decode_frame_threads_ms"]
    for k, x in med.items():
        print(f"{k:32s} {x:10.1f}" if not k.startswith("ratio") else f"{k:32s} {x:10.2f}x")
    for k, st in frames_returned.items():
        print(f"{k:32s} {st.get('path')}: {st.get('fed')} packets fed, {st.get('decoded')} frames returned")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (the machine's cores: {os.cpu_count()}); "
          f"malloc tuned: {malloc_tuned}")
    if json_path:
        Path(json_path).write_text(json.dumps({"median": med, "rounds": rows, "frames": frames_returned,
                                               "loadavg": load, "malloc_tuned": malloc_tuned}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--fps", type=float, default=2.0)
    ap.add_argument("--hf-python", default="/root/torchvenv/bin/python")
    ap.add_argument("--clip", default="/tmp/bench_video_720p.mp4")
    ap.add_argument("--encoding", choices=sorted(ENCODINGS), default="x264-defaults")
    ap.add_argument("--json")
    ap.add_argument("--hf", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf:
        return hf_main(args.clip, args.fps)

    import numpy as np

    sys.path.insert(0, str(ROOT))
    from sglang_mm_grpc import Preprocessor
    from sglang_mm_grpc.server.allocator import tune_for_large_tensors
    from sglang_mm_grpc.core.carriers import VideoOptions
    from sglang_mm_grpc.media import video as media_video

    tuned = tune_for_large_tensors()  # as the server runs (and bench.py times) ours
    data = make_clip(Path(args.clip), args.encoding)
    pp = Preprocessor.from_model(MODEL + "@torchvision")
    opts = VideoOptions(fps=args.fps)
    hf = subprocess.Popen([args.hf_python, __file__, "--hf", "--clip", args.clip, "--fps", str(args.fps)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")

    def ask(cmd: str) -> dict:
        hf.stdin.write(cmd + "\n")
        hf.stdin.flush()
        return json.loads(hf.stdout.readline())

    ours = pp.preprocess([], videos=[data], video_options=opts, use_cache=False)  # warm (compiles)
    want = ask("check")
    got = hashlib.sha256(np.ascontiguousarray(ours.pixel_values_videos).tobytes()).hexdigest()
    assert got == want["sha256"], "pixel_values_videos differ from HF's"
    v = ours.videos[0]
    print(f"clip ({args.encoding}): {len(data) / 1e6:.2f} MB, {v.total_frames} frames at {v.fps:g} fps, {v.width}x{v.height}; "
          f"sampled {len(v.frame_indices)} frames at {args.fps:g} fps -> {v.resized_width}x{v.resized_height}, "
          f"grid {v.grid}, {v.token_count} tokens, pixel_values_videos {ours.pixel_values_videos.shape} "
          "(equal to HF's)")
    print(f"HF's decoder threads (PyAV defaults): {want['threads']}; ours decode with the same in the headline")
    meta = media_video.probe(data)
    decodes = {"ours_decode_ms": {}, "ours_decode_sequential_ms": {"sequential": True},
               "ours_decode_keep_nonref_ms": {"skip_nonref": False}, "ours_decode_frame_threads_ms": {"threads": "AUTO"}}
    frames_returned = {}
    for name, kw in decodes.items():
        stats: dict = {}
        for _frame in media_video.frames(data, v.frame_indices, meta, stats=stats, **kw):
            pass
        frames_returned[name.replace("_ms", "")] = stats
    rows = {k: [] for k in ("ours_ms", "ours_cpu_ms", "ours_all_threads_cpu_ms", "hf_ms", "hf_cpu_ms",
                            "hf_all_threads_cpu_ms", "hf_decode_ms", "hf_decode_all_threads_cpu_ms", *decodes,
                            "ours_decode_all_threads_cpu_ms", "ours_frame_threads_ms")}
    for _ in range(args.rounds):
        for name, kw in (("ours_ms", {}), ("ours_frame_threads_ms", {"threads": "AUTO"})):
            media_video.THREADS = kw.get("threads")  # the preprocess's decoder threads
            t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            pp.preprocess([], videos=[data], video_options=opts, use_cache=False)
            rows[name].append((time.perf_counter() - t0) * 1e3)
            if name == "ours_ms":
                rows["ours_cpu_ms"].append((time.thread_time() - c0) * 1e3)
                rows["ours_all_threads_cpu_ms"].append((time.process_time() - p0) * 1e3)
        media_video.THREADS = None
        r = ask("call")
        rows["hf_ms"].append(r["ms"])
        rows["hf_cpu_ms"].append(r["cpu_ms"])
        rows["hf_all_threads_cpu_ms"].append(r["all_threads_cpu_ms"])
        for name, kw in decodes.items():
            t0, p0 = time.perf_counter(), time.process_time()
            for _frame in media_video.frames(data, v.frame_indices, meta, **kw):
                pass
            rows[name].append((time.perf_counter() - t0) * 1e3)
            if name == "ours_decode_ms":
                rows["ours_decode_all_threads_cpu_ms"].append((time.process_time() - p0) * 1e3)
        r = ask("decode")
        rows["hf_decode_ms"].append(r["ms"])
        rows["hf_decode_all_threads_cpu_ms"].append(r["all_threads_cpu_ms"])
    hf.stdin.close()
    hf.wait(timeout=60)
    report(rows, frames_returned, args.json, tuned)


if __name__ == "__main__":
    main()
