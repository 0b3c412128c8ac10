#!/usr/bin/env python3
"""Benchmarks, side by side with the HF processors and the cost floor, in one run.

    python scripts/bench.py [--quick] [--json out.json] [--chart out.png]

Run from a checkout with the package installed (``pip install -e '.[test,bench]'``). It
is not part of the package: it times the HF processors (transformers, and torch for the
torchvision ones, when installed) and draws with matplotlib, which the service never needs.

Sections (each prints its table; all numbers are medians of repeated runs):
  inprocess  per model and image: ours, HF's PIL and torchvision processors (when
             installed) and the floor (Pillow decode + one write of a fresh output
             tensor); ratios ours/floor, HF/ours and HF/decode (the most any
             preprocessing after the same decode could gain). One thread. HF runs in a
             process of its own that never imports this package (``bench_hf.py``;
             ``--hf-python`` picks its interpreter), one call there and one here in
             turn; ours gets never-seen bytes each call; the floor is timed in both
             processes and the faster one used; our output is checked bit for bit
             against the HF reference on the same bytes (``exact``). Every time is
             taken as wall clock and as the calling thread's CPU time (``*_cpu_*``).
             A column HF's process cannot fill (transformers, or torch and
             torchvision, not importable there) is left empty and the run says which
             import failed and what to install, before and after the table.
  stages     per model, for 640x480, 1024x768 and 1920x1080 photo JPEGs: hashing, the
             header and plan, Pillow's decode into RGBX, allocation, each resize pass,
             normalize + patchify / tiles (with the output's write), timed one by one in
             turn with the whole call; ``rest`` is what the call takes beyond them.
  server     Preprocess + Assemble(vLLM) through a server on 127.0.0.1 vs in-process, and
             what gRPC alone takes to move a payload of that size; the same over shared
             memory (the pixels staged by Preprocess and handed out, or copied into a
             segment by Assemble), and inline in bfloat16 vs float32 (time and bytes);
             throughput of two-phase and Preprocess-only flows from 8 concurrent clients
             (in two processes) with the server on 1 core vs 2 cores.
  startup    time to SERVING with a cold numba cache, then with a warm one (5 fresh
             servers); 1st vs 10th request after SERVING (medians over those servers).
  cache      Preprocess of a repeated 1920x1080 image through the server vs its first time.
  controls   media ids and Plan through one server: a repeated 1920x1080 JPEG sent by its
             media id (the client hashes it and sends 64 characters) vs its first call
             and vs resending its bytes; Plan of a 12 MP JPEG sent as bytes and by media
             id, client side, with the server's own time and the in-process plan.
  memory     peak RSS a request adds vs the size of its output tensors (in a fresh
             process whose malloc maps every block of 128 KiB or more afresh and
             unmaps it on free, so the peak counts every buffer alive at once
             rather than what a warm heap happens to hold).
Images are generated deterministically: high-entropy photo-like JPEGs (``WxH:photoQ``,
fine texture and sensor noise at quality Q, about 4 bits per pixel, decoding as slowly as
camera photos do) and smooth synthetic ones (``WxH``, JPEG q90; ``WxH:png``).
This process tunes glibc malloc, turns Pillow's block allocator on and asks for AMX tiles
as ``serve`` does (``server.allocator``, ``media.enable_in_place_decode``, ``kernels.amx``), so
tensors are reused rather than faulted in afresh, decoded pixels are read in place, and
the resize kernels multiply on AMX tiles where the CPU has them (``--no-amx``: not).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

#: Photo-like high-entropy JPEGs from 640x480 to 12 MP (quality 92-95), then a smooth
#: synthetic JPEG and a PNG.
IMAGES = ["640x480:photo95", "1024x768:photo92", "1366x768:photo92", "1920x1080:photo92", "2048x1365:photo92",
          "4032x3024:photo92", "1920x1080", "2560x1440:png"]
MODELS = ["Qwen/Qwen2-VL-7B-Instruct", "llava-hf/llava-v1.6-mistral-7b-hf", "meta-llama/Llama-4-Scout-17B-16E-Instruct"]
SERVER_MODEL = "Qwen/Qwen2-VL-7B-Instruct"


# -- inputs ---------------------------------------------------------------------------


def make_image(spec: str) -> bytes:
    """``WxH`` (JPEG q90) or ``WxH:png``: smooth content with sensor-like noise;
    ``WxH:photoQ``: a high-entropy photo-like JPEG at quality Q (``photo_like``)."""
    dims, _, fmt = spec.partition(":")
    w, h = map(int, dims.split("x"))
    if fmt.startswith("photo"):
        return photo_like(w, h, int(fmt[5:] or 92))
    rng = np.random.default_rng(w * 31 + h)
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
    a = 127.5 + 100 * np.sin(7 * x + 5 * y + rng.uniform(0, 6.28, (1, 1, 3)).astype(np.float32))
    a = np.clip(a + 12 * rng.standard_normal((h, w, 3), dtype=np.float32), 0, 255).astype(np.uint8)
    b = io.BytesIO()
    Image.fromarray(a).save(b, "PNG" if fmt == "png" else "JPEG", **({} if fmt == "png" else {"quality": 90}))
    return b.getvalue()


def photo_like(w: int, h: int, quality: int = 92) -> bytes:
    """A deterministic JPEG that costs what a camera photo costs to decode: a scene of
    coarse colour fields, fine texture (value noise at 16, 6, 3 and 1 px, like foliage
    or fabric), and sensor noise (luma and chroma, per pixel); 4:2:0 as cameras write.
    About 4 bits per pixel at q92-95 (a phone photo: 3-5), where the smooth images
    above take about 1: entropy decoding, not the pixel count, sets decode time."""
    rng = np.random.default_rng(w * 7919 + h * 31 + quality)

    def upscaled(a: np.ndarray, resample) -> np.ndarray:
        mode = "F" if a.dtype == np.float32 else None
        return np.asarray(Image.fromarray(a, mode).resize((w, h), resample), dtype=np.float32)

    scene = 0.55 * upscaled(rng.integers(0, 256, (5, 6, 3), dtype=np.uint8), Image.BICUBIC) \
        + 0.45 * upscaled(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8), Image.BICUBIC)
    texture = np.zeros((h, w), np.float32)
    for cell, amplitude in ((16, 18), (6, 14), (3, 10), (1, 8)):
        noise = rng.uniform(-1, 1, (h // cell + 2, w // cell + 2)).astype(np.float32)
        texture += amplitude * upscaled(noise, Image.BILINEAR)
    a = scene + texture[:, :, None]
    a += 7.0 * rng.standard_normal((h, w, 1), dtype=np.float32)  # luma noise
    a += 3.5 * rng.standard_normal((h, w, 3), dtype=np.float32)  # chroma noise
    b = io.BytesIO()
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(b, "JPEG", quality=quality)
    return b.getvalue()


def variant(jpeg: bytes, k: int) -> bytes:
    """The same JPEG as new bytes (a comment segment holding ``k`` after SOI): a cache
    miss that decodes exactly like the original."""
    note = f"variant {k}".encode()
    return jpeg[:2] + b"\xff\xfe" + (len(note) + 2).to_bytes(2, "big") + note + jpeg[2:]


def median_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# -- references: HF's processors in a process of their own -------------------------------

HF_WORKER = Path(__file__).resolve().parent / "bench_hf.py"


def _hf_kind_and_config(model: str) -> tuple[str, dict]:
    """The HF image processor class name (without ``Pil``/``Fast``) and the preset's
    preprocessor_config, for the HF worker to build both processors from."""
    from sglang_mm_grpc.config import resolve

    cfg = {k: v for k, v in resolve(model).preprocessor_config.items() if k != "processor_class"}
    kind = str(cfg.pop("image_processor_type", "")).removesuffix("Fast").removesuffix("Pil")
    return kind, cfg


class _HFWorker:
    """``scripts/bench_hf.py`` in a child process (``python``: any interpreter with
    transformers, and torch for the torchvision column); it never imports this package.
    Each request is one call, timed there; the answers are read here."""

    def __init__(self, python: str):
        self.proc = subprocess.Popen([python, str(HF_WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

    def ask(self, op: str, **fields) -> dict:
        reply = self.try_ask(op, **fields)
        if not reply.get("ok"):
            raise RuntimeError(f"the HF worker refused {op}: {reply}")
        return reply

    def try_ask(self, op: str, **fields) -> dict:
        """The reply, refusals included (``ok`` false, ``error`` says why)."""
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the HF worker ({HF_WORKER.name}) exited with {self.proc.wait()}")
        return json.loads(line)

    def close(self) -> dict:
        try:
            return self.try_ask("quit")
        finally:
            self.proc.stdin.close()
            self.proc.wait(30)


def _png_variant(png: bytes, k: int) -> bytes:
    """The same PNG as new bytes: a tEXt chunk holding ``k`` after IHDR."""
    import zlib

    body = b"tEXt" + b"variant\x00" + str(k).encode()
    chunk = (len(body) - 4).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")
    return png[:33] + chunk + png[33:]  # signature (8) + IHDR (25)


def fresh_bytes(raw: bytes, k: int) -> bytes:
    """``raw`` as never-seen bytes that decode to the same pixels (JPEG or PNG)."""
    return _png_variant(raw, k) if raw.startswith(b"\x89PNG") else variant(raw, k)


def _decode_rgb(raw: bytes):
    im = Image.open(io.BytesIO(raw))
    im.load()
    return im if im.mode == "RGB" else im.convert("RGB")


def _digest(a: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).data).hexdigest()


# -- sections ---------------------------------------------------------------------------


def bench_inprocess(models, images, repeat, hf_python: str | None = None, meta: dict | None = None) -> list[dict]:
    """Ours here, HF's processors in ``bench_hf.py``'s process, one call each in turn.

    Ours: ``Preprocessor.preprocess`` as the server runs it (this process's malloc tuned
    and Pillow's block allocator on, ``enable_in_place_decode``), each call on bytes it
    has never seen (the same image with a comment segment or text chunk naming the call:
    another blake3, the same pixels) and with ``use_cache=False``: nothing is looked up
    or kept, which is what a cache miss does apart from handing its result to the cache
    (no copy for one image). HF: its PIL and torchvision processors on the same bytes, in
    a process that never imports this package (default malloc and Pillow, torch at one
    thread). The floor (Pillow decode + one write of a fresh output tensor) is timed in
    both processes; the faster one is used. The calls rotate within each repetition, so
    a slow stretch of the machine lands on all of them."""
    from sglang_mm_grpc import Preprocessor
    from sglang_mm_grpc.config import preset_names
    from sglang_mm_grpc.media import enable_in_place_decode
    from sglang_mm_grpc.media.decode import decode_image

    enable_in_place_decode()  # as the server does: decoded pixels read in Pillow's buffer
    meta = meta if meta is not None else {}
    rows = []
    hf = _HFWorker(hf_python or sys.executable)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for model in models:
                if model not in preset_names():
                    print(f"  (skipping {model}: not a preset here)")
                    continue
                pp = Preprocessor.from_model(model, cache_bytes=0)
                pp.warmup()
                kind, cfg = _hf_kind_and_config(model)
                loaded = hf.try_ask("load", kind=kind, config=cfg)
                meta.update(hf_pid=loaded.get("pid", hf.proc.pid), bench_pid=os.getpid(), hf_versions=loaded.get("versions", {}),
                            hf_imported_package=loaded.get("imported_package"))
                errors = loaded["errors"] if "errors" in loaded else {k: loaded.get("error") for k in ("hf_pil", "hf_tv")}
                meta.setdefault("hf_missing", {})[model] = errors
                for key, err in errors.items():
                    print(f"  ({model}: no {key} column: {err})", flush=True)
                available = loaded.get("available", [])
                hf_floor = loaded.get("ok", False)  # the HF process can time the floor (numpy, Pillow)
                # the reference ours is bit-exact with: HF's PIL class, else (Llama 4) torchvision's
                reference = "hf_pil" if "hf_pil" in available else ("hf_tv" if "hf_tv" in available else None)
                for spec in images:
                    rows.append(_inprocess_row(pp, hf if hf_floor else None, model, spec, Path(tmp), repeat,
                                               available, reference, decode_image))
                    print(_inprocess_line(rows[-1]), flush=True)
    finally:
        meta["hf_imported_package_at_exit"] = hf.close().get("imported_package")
        for model, errors in meta.get("hf_missing", {}).items():  # again, after the table
            for key, err in errors.items():
                print(f"  ({model.split('/')[-1]}: no {key} column: {err})")
    return rows


#: Untimed rounds of every call before an image's timed ones.
WARMUP_ROUNDS = 3


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def _ms(t0, t1) -> list[float]:
    """[wall, cpu] milliseconds between two ``_clock`` readings (cpu: this thread's, which
    a shared machine's other work does not inflate the way it does wall time)."""
    return [(t1[0] - t0[0]) * 1e3, (t1[1] - t0[1]) * 1e3]


def _inprocess_row(pp, hf: _HFWorker | None, model: str, spec: str, tmp: Path, repeat: int, available, reference,
                   decode_image) -> dict:
    """One image's row; ``hf`` None: the HF process cannot time anything (no floor there)."""
    raw = make_image(spec)
    path = tmp / "image"
    path.write_bytes(raw)
    out = pp.preprocess([raw], use_cache=False)
    shape = out.pixel_values.shape
    if hf is not None:
        hf.ask("image", path=str(path), shape=list(shape))
    img = decode_image(raw, item=0)
    plan = pp.family.plan(img.height, img.width, 0)
    bshape, slots = pp.family.batch_shape([plan])
    buf = np.zeros(bshape, np.float32)
    sides = ("bench", "hf") if hf is not None else ("bench",)  # where the floor is timed
    keys = ("ours", "post_decode", *(f"{w}_{p}" for p in sides for w in ("decode", "write")), *available)
    samples: dict[str, list] = {k: [] for k in keys}  # [wall, cpu] per call
    calls = 0

    def ours():
        nonlocal calls
        fresh = fresh_bytes(raw, calls)
        calls += 1
        t0 = _clock()
        pp.preprocess([fresh], use_cache=False)
        return {"ours": _ms(t0, _clock())}

    def post_decode():
        t0 = _clock()
        pp.family.process_item(img, plan, buf[slots[0]])
        return {"post_decode": _ms(t0, _clock())}

    def floor_bench():
        t0 = _clock()
        _decode_rgb(raw)
        t1 = _clock()
        np.empty(shape, np.float32).fill(1.0)
        return {"decode_bench": _ms(t0, t1), "write_bench": _ms(t1, _clock())}

    def floor_hf():
        r = hf.ask("time", what="floor")
        return {"decode_hf": r["decode"], "write_hf": r["write"]}

    def hf_call(key):
        return lambda: {key: hf.ask("time", what=key)["ms"]}

    calls_in_turn = [ours, floor_bench, *(hf_call(k) for k in available), *([floor_hf] if hf else []), post_decode]
    for _ in range(WARMUP_ROUNDS):  # untimed: first calls (allocations, lazy imports, a settling machine)
        for step in calls_in_turn:
            step()
    for rep in range(repeat):
        k = rep % len(calls_in_turn)
        for step in calls_in_turn[k:] + calls_in_turn[:k]:
            for key, ms in step().items():
                samples[key].append(ms)
    w, h = Image.open(io.BytesIO(raw)).size
    row = {"model": model, "image": spec, "bytes": len(raw), "bits_per_pixel": 8 * len(raw) / (w * h),
           "output": list(shape), "samples_each": repeat}
    for clock, suffix in ((0, ""), (1, "_cpu")):  # wall-clock times, then CPU times of the calling thread
        med = {k: statistics.median(s[clock] for s in v) for k, v in samples.items()}
        floors = {p: statistics.median(d[clock] + w_[clock] for d, w_ in zip(samples[f"decode_{p}"],
                                                                             samples[f"write_{p}"]))
                  for p in sides}
        side = min(floors, key=floors.get)
        r = {"ours_ms": med["ours"], "post_decode_ms": med["post_decode"],
             "floor_ms": floors[side], "floor_process": side, "decode_ms": med[f"decode_{side}"],
             "write_ms": med[f"write_{side}"]}
        for p in sides:
            r.update({f"floor_{p}_ms": floors[p], f"decode_{p}_ms": med[f"decode_{p}"],
                      f"write_{p}_ms": med[f"write_{p}"]})
        r["ours_over_floor"] = r["ours_ms"] / r["floor_ms"]
        fastest_decode = min(med[f"decode_{p}"] for p in sides)
        for key in available:
            r[f"{key}_ms"] = med[key]
            r[f"speedup_vs_{key}"] = med[key] / r["ours_ms"]
            # the most any preprocessing after the same Pillow decode could reach
            r[f"{key}_over_decode"] = med[key] / fastest_decode
        row.update({(k[:-3] + suffix + "_ms" if k.endswith("_ms") else k + suffix): v for k, v in r.items()})
    if reference is not None:
        theirs = hf.ask("digest", what=reference)
        row["exact_vs"] = reference
        row["exact"] = theirs["sha256"] == _digest(out.pixel_values) and \
            int(np.prod(theirs["shape"])) == out.pixel_values.size
    row["samples_ms"] = {k: [[round(x, 3) for x in s] for s in v] for k, v in samples.items()}
    return row


def summarize_inprocess(rows: list[dict]) -> dict:
    """Per model, over its photo-like JPEGs: the median of ours / floor, the least HF /
    ours, and the HF / decode cap where that least one was measured; from wall-clock
    times, and (``_cpu``) from CPU times."""
    out = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        photos = [r for r in rows if r["model"] == model and ":photo" in r["image"]]
        if not photos:
            continue
        s: dict = {"images": [r["image"] for r in photos]}
        for suffix in ("", "_cpu"):
            s[f"median_ours_over_floor{suffix}"] = statistics.median(r[f"ours_over_floor{suffix}"] for r in photos)
            for key in ("hf_pil", "hf_tv"):
                have = [r for r in photos if f"speedup_vs_{key}{suffix}" in r]
                if have:
                    least = min(have, key=lambda r: r[f"speedup_vs_{key}{suffix}"])
                    s[f"min_speedup_vs_{key}{suffix}"] = least[f"speedup_vs_{key}{suffix}"]
                    s[f"min_speedup_vs_{key}{suffix}_image"] = least["image"]
                    s[f"{key}_over_decode{suffix}_there"] = least[f"{key}_over_decode{suffix}"]
        out[model] = s
    return out


def _print_summary(summary: dict) -> None:
    for model, s in summary.items():
        for suffix, clock in (("", "wall"), ("_cpu", "cpu")):
            parts = [f"median ours/floor {s[f'median_ours_over_floor{suffix}']:.2f}x"]
            for key, name in (("hf_pil", "HF PIL"), ("hf_tv", "HF torchvision")):
                if f"min_speedup_vs_{key}{suffix}" in s:
                    parts.append(f"least {name}/ours {s[f'min_speedup_vs_{key}{suffix}']:.2f}x at "
                                 f"{s[f'min_speedup_vs_{key}{suffix}_image']} (cap {name}/decode there "
                                 f"{s[f'{key}_over_decode{suffix}_there']:.2f}x)")
            print(f"  {model.split('/')[-1]}, photo JPEGs, {clock}: " + "; ".join(parts), flush=True)


INPROCESS_HEADER = (f"{'model':<26} {'image':<18} {'decode':>7} {'write':>6} {'ours':>7} {'post':>6} "
                    f"{'hf-pil':>7} {'hf-tv':>7} {'/floor':>7} {'xPIL':>6} {'xTV':>6} {'cap':>6} {'exact':>5} "
                    f"| cpu: {'/floor':>7} {'xPIL':>6} {'xTV':>6}")


def _inprocess_line(r: dict) -> str:
    def f(key, width, fmt="{:.1f}"):
        return (fmt.format(r[key]) if key in r else "-").rjust(width)

    cap = r.get("hf_pil_over_decode", r.get("hf_tv_over_decode"))
    return (f"{r['model'].split('/')[-1][:26]:<26} {r['image']:<18} {f('decode_ms', 7)} {f('write_ms', 6)} "
            f"{f('ours_ms', 7)} {f('post_decode_ms', 6, '{:.2f}')} {f('hf_pil_ms', 7)} {f('hf_tv_ms', 7)} "
            f"{f('ours_over_floor', 7, '{:.2f}x')} {f('speedup_vs_hf_pil', 6, '{:.1f}x')} "
            f"{f('speedup_vs_hf_tv', 6, '{:.1f}x')} {(f'{cap:.1f}x' if cap else '-'):>6} "
            f"{str(r.get('exact', '-')):>5} |      {f('ours_over_floor_cpu', 7, '{:.2f}x')} "
            f"{f('speedup_vs_hf_pil_cpu', 6, '{:.1f}x')} {f('speedup_vs_hf_tv_cpu', 6, '{:.1f}x')}")


# -- per-stage profile -------------------------------------------------------------------

STAGE_IMAGES = ["640x480:photo95", "1024x768:photo92", "1920x1080:photo92"]


def _pass_stages(px, out_h, out_w, bh, kh, bv, kv, h_first: bool, label: str):
    """The passes ``resample_pil.separable`` runs for an RGB result, each as (name, fn),
    and the result: the same kernels on the same intermediate shapes."""
    from sglang_mm_grpc.kernels import resample_pil

    in_h, in_w, sp = px.shape
    out = np.empty((out_h, out_w, 3), np.uint8)
    h_name, v_name = f"{label}resize h {in_w}->{out_w}", f"{label}resize v {in_h}->{out_h}"
    if out_w == in_w:
        steps = [(v_name, lambda: resample_pil.vertical_pass(px, out, bv, kv))]
    elif out_h == in_h:
        steps = [(h_name, lambda: resample_pil.horizontal_pass(px, out, np.int64(0), bh, kh))]
    elif h_first:
        first, last = int(bv[0, 0]), int((bv[:, 0] + bv[:, 1]).max())
        tmp = np.empty((last - first, out_w, 3), np.uint8)
        shifted = bv.copy()
        shifted[:, 0] -= first
        steps = [(h_name, lambda: resample_pil.horizontal_pass(px, tmp, np.int64(first), bh, kh)),
                 (v_name, lambda: resample_pil.vertical_pass(tmp, out, shifted, kv))]
    else:
        tmp = np.empty((out_h, in_w, sp), np.uint8)
        steps = [(v_name, lambda: resample_pil.vertical_pass(px, tmp, bv, kv)),
                 (h_name, lambda: resample_pil.horizontal_pass(tmp, out, np.int64(0), bh, kh))]
    return steps, out


def _resize_stages(px, out_h, out_w, resample: int, torchvision: bool, label: str = ""):
    """(stages, result) of the family's resize: Pillow's (its pass order) or torch's
    (horizontal first, its weights), checked equal to the kernel entry's own result; an
    image already of that size is read as it is (no stage)."""
    from sglang_mm_grpc.kernels import resample_pil, resample_tv

    in_h, in_w = px.shape[:2]
    if (in_h, in_w) == (out_h, out_w):
        return [], px
    none = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))
    if torchvision:
        mode = resample_tv.PIL_FILTER_MODES[resample] if isinstance(resample, int) else resample
        bh, kh = resample_tv.coeffs(in_w, out_w, mode) if out_w != in_w else none
        bv, kv = resample_tv.coeffs(in_h, out_h, mode) if out_h != in_h else none
        h_first, want = True, resample_tv.resize_rgb(px, out_h, out_w, mode)
    else:
        bh, kh = resample_pil.coeffs(in_w, out_w, resample) if out_w != in_w else none
        bv, kv = resample_pil.coeffs(in_h, out_h, resample) if out_h != in_h else none
        h_first = resample_pil.horizontal_first(in_h, in_w, out_h, out_w)
        want = resample_pil.resize_rgb(px, out_h, out_w, resample)
    steps, out = _pass_stages(px, out_h, out_w, bh, kh, bv, kv, h_first, label)
    for _, step in steps:
        step()
    if not np.array_equal(out, want):
        raise AssertionError(f"staged {label}resize differs from the kernel's")
    return steps, out


def _two_stages(px, size_a, size_b, resample, torchvision: bool, labels):
    """(stages, (result_a, result_b)) of ``resize_rgb_two``: when the two resizes share
    their horizontal pass, that shared pass then each vertical pass; else two resizes."""
    from sglang_mm_grpc.kernels import resample_pil, resample_tv

    in_h, in_w = px.shape[:2]
    if torchvision:
        mode = resample
        if mode in resample_tv.MODES:
            kind = resample_tv._KIND[mode]
            coeffs_of, h_first_of = (lambda i, o: resample_tv._cached(i, o, kind)[::3]), (lambda *_: True)
        else:
            coeffs_of = None
    else:
        coeffs_of = (lambda i, o: resample_pil._cached_coeffs(i, o, resample)) if resample != resample_pil.NEAREST \
            else None
        h_first_of = resample_pil.horizontal_first
    (ha, wa), (hb, wb) = size_a, size_b
    shared = coeffs_of is not None and in_h not in (ha, hb) and in_w not in (wa, wb) and \
        h_first_of(in_h, in_w, ha, wa) and h_first_of(in_h, in_w, hb, wb) and \
        resample_pil.rows_read(coeffs_of(in_h, ha)[0]) == resample_pil.rows_read(coeffs_of(in_h, hb)[0])
    if not shared:
        steps_a, out_a = _resize_stages(px, ha, wa, resample, torchvision, labels[0])
        steps_b, out_b = _resize_stages(px, hb, wb, resample, torchvision, labels[1])
        return steps_a + steps_b, (out_a, out_b)
    (bv_a, kv_a), (bv_b, kv_b) = coeffs_of(in_h, ha), coeffs_of(in_h, hb)
    (bh_a, kh_a), (bh_b, kh_b) = coeffs_of(in_w, wa), coeffs_of(in_w, wb)
    first, last = resample_pil.rows_read(bv_a)
    tmp_a, tmp_b = np.empty((last - first, wa, 3), np.uint8), np.empty((last - first, wb, 3), np.uint8)
    out_a, out_b = np.empty((ha, wa, 3), np.uint8), np.empty((hb, wb, 3), np.uint8)
    sa, sb = bv_a.copy(), bv_b.copy()
    sa[:, 0] -= first
    sb[:, 0] -= first
    steps = [(f"shared resize h {in_w}->{wa} ({labels[0][:-2]}), {wb} ({labels[1][:-2]})",
              lambda: resample_pil.horizontal_pass_two(px, tmp_a, tmp_b, np.int64(first), bh_a, kh_a, bh_b, kh_b)),
             (f"{labels[0]}resize v {in_h}->{ha}", lambda: resample_pil.vertical_pass(tmp_a, out_a, sa, kv_a)),
             (f"{labels[1]}resize v {in_h}->{hb}", lambda: resample_pil.vertical_pass(tmp_b, out_b, sb, kv_b))]
    for _, step in steps:
        step()
    want = (resample_tv.resize_rgb_two if torchvision else resample_pil.resize_rgb_two)(px, size_a, size_b, resample)
    if not (np.array_equal(out_a, want[0]) and np.array_equal(out_b, want[1])):
        raise AssertionError("staged shared resize differs from the kernel's")
    return steps, (out_a, out_b)


def _family_stages(family, img, plan, out) -> list:
    """process_item split into its kernels, as (name, fn), for the families the in-process
    section benchmarks; any other family is one stage."""
    from sglang_mm_grpc.kernels import chw, patchify, window

    px = img.pixels
    if family.name == "qwen_vl":
        c = family.config
        h, w = plan.resized_size
        steps, resized = _resize_stages(px, h, w, c.resample, family.torchvision)
        return steps + [("normalize + patchify (+ write)", lambda: patchify.lut_patchify(
            resized, family._lut, out, c.patch_size, c.merge_size, c.temporal_patch_size))]
    if family.name == "llava_next":
        c = family.config
        tile, (best_h, best_w), (nh, nw) = c.tile, plan.geometry, plan.resized_size
        steps, (base, resized) = _two_stages(px, (tile, tile), (nh, nw), c.image.resample, False,
                                             ("base tile: ", "tiles: "))
        return steps + [
            ("normalize base tile (+ write)", lambda: chw.normalize_chw(base, family._lut, out[0])),
            ("normalize + cut tiles (+ write)", lambda: window.tiles_chw(
                resized, (best_h - nh) // 2, (best_w - nw) // 2, best_h // tile, best_w // tile, family._lut,
                out[1:], fill=0))]
    if family.name == "llama4":
        tile, (rows, cols) = family.config.tile, plan.geometry
        n = rows * cols
        if n > 1:
            steps, (resized, small) = _two_stages(px, plan.resized_size, (tile, tile), family._mode, True,
                                                  ("tiles: ", "global tile: "))
        else:
            steps, resized = _resize_stages(px, *plan.resized_size, family._mode, True, "tiles: ")
        steps.append(("normalize + cut tiles (+ write)", lambda: window.tiles_chw(
            resized, 0, 0, rows, cols, family._lut, out[:n], fill=0)))
        if n > 1:
            steps.append(("normalize global tile (+ write)", lambda: chw.normalize_chw(small, family._lut, out[n])))
        return steps
    return [("process_item", lambda: family.process_item(img, plan, out))]


def bench_stages(models, images, repeat) -> list[dict]:
    """Per model and image, each stage of one call timed on its own, in turn with the
    others and the whole call: hashing, the header and plan, Pillow's decode into its RGBX
    buffer, allocating pixel_values, each resize pass, normalize + patchify / tiles (which
    include writing the output); ``rest`` is the whole call minus those: the token layout
    and positions, Python between the steps, and the stages' extra cost inside a call,
    where their inputs are colder than when each runs alone on hot buffers (negative
    where the call fuses stages: Qwen-VL resizes horizontal first band by band into its
    patches, which the profile runs pass by pass over whole images)."""
    from sglang_mm_grpc import Preprocessor
    from sglang_mm_grpc.config import preset_names
    from sglang_mm_grpc.pipeline.driver import _new_batch
    from sglang_mm_grpc.core.hashing import content_hash
    from sglang_mm_grpc.media import enable_in_place_decode
    from sglang_mm_grpc.media.decode import decode_pixels, open_image

    enable_in_place_decode()
    rows = []
    for model in models:
        if model not in preset_names():
            continue
        pp = Preprocessor.from_model(model, cache_bytes=0)
        pp.warmup()
        family = pp.family
        for spec in images:
            raw = make_image(spec)
            img = decode_pixels(open_image(raw, item=0), transparency=family.transparency)
            plan = family.plan(img.height, img.width, 0)
            shape, slots = family.batch_shape([plan])
            batch = _new_batch(shape, slots)
            out = batch[slots[0]]
            steps = _family_stages(family, img, plan, out)
            for _, step in steps:
                step()
            want = _new_batch(shape, slots)
            family.process_item(img, plan, want[slots[0]])
            if not np.array_equal(batch.view(np.uint32), want.view(np.uint32)):
                raise AssertionError(f"{model} {spec}: the staged kernels differ from process_item")
            calls = 0

            def whole():
                nonlocal calls
                fresh = fresh_bytes(raw, calls)
                calls += 1
                t0 = _clock()
                pp.preprocess([fresh], use_cache=False)
                return _ms(t0, _clock())

            def timed(fn, fresh_header=False):
                def run():
                    arg = open_image(raw, item=0) if fresh_header else None
                    t0 = _clock()
                    fn(arg) if fresh_header else fn()
                    return _ms(t0, _clock())
                return run

            named = [("hash (blake3)", timed(lambda: content_hash(raw))),
                     ("header + plan", timed(lambda: family.plan(*_hw(open_image(raw, item=0)), 0))),
                     ("decode into RGBX (Pillow)", timed(lambda h: decode_pixels(h, transparency=family.transparency),
                                                         fresh_header=True)),
                     ("allocate pixel_values", timed(lambda: _new_batch(shape, slots)))]
            named += [(name, timed(step)) for name, step in steps]
            named.append(("whole call", whole))
            samples = {name: [] for name, _ in named}
            for _, run in named:
                run()  # warm
            for rep in range(repeat):
                k = rep % len(named)
                for name, run in named[k:] + named[:k]:
                    samples[name].append(run())
            med = {name: [statistics.median(s[i] for s in v) for i in (0, 1)] for name, v in samples.items()}
            total = med.pop("whole call")
            parts = {name: {"wall_ms": v[0], "cpu_ms": v[1]} for name, v in med.items()}
            parts["rest"] = {"wall_ms": total[0] - sum(v[0] for v in med.values()),
                             "cpu_ms": total[1] - sum(v[1] for v in med.values())}
            row = {"model": model, "image": spec, "resized": list(plan.resized_size), "output": list(shape),
                   "whole_wall_ms": total[0], "whole_cpu_ms": total[1], "stages": parts,
                   "staged_equals_process_item": True}
            rows.append(row)
            _print_stages(row)
    return rows


def _hw(header) -> tuple[int, int]:
    return header.height, header.width


def _print_stages(row: dict) -> None:
    print(f"  {row['model'].split('/')[-1]} {row['image']} -> {row['resized'][0]}x{row['resized'][1]}, "
          f"output {'x'.join(map(str, row['output']))}: whole call {row['whole_cpu_ms']:.2f} ms CPU "
          f"({row['whole_wall_ms']:.2f} wall)", flush=True)
    for name, t in row["stages"].items():
        share = 100 * t["cpu_ms"] / row["whole_cpu_ms"]
        print(f"      {name:<42} {t['cpu_ms']:7.2f} ms CPU {share:5.1f}%   ({t['wall_ms']:.2f} wall)", flush=True)


class _Server:
    """A server subprocess on a free 127.0.0.1 port, optionally pinned to some cores."""

    def __init__(self, *args: str, cores: str | None = None, env: dict | None = None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.target = f"127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "sglang_mm_grpc.cli", "serve", "--port", str(self.port), *args, "--log-level", "WARNING"]
        if cores and shutil.which("taskset"):
            argv = ["taskset", "-c", cores, *argv]
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_serving(self, timeout: float = 300) -> float:
        from sglang_mm_grpc.client import Client

        with Client(self.target) as c:
            c.wait_until_serving(timeout)
        return time.perf_counter() - self.t0

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _two_phase(client, raw: bytes, backend: str = "vllm"):
    r = client.preprocess(SERVER_MODEL, [raw])
    client.assemble(r.handle, backend, release=True)


def _assemble_bytes(client):
    """Assemble returning the response bytes unparsed: a router forwards the payload, so
    the load generator does not spend the CPU it shares with the server on parsing it."""
    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

    call = client._channel.unary_unary(
        "/sglang_mm.v1.MultimodalPreprocessor/Assemble", request_serializer=pb.AssembleRequest.SerializeToString
    )
    return lambda handle: call(pb.AssembleRequest(handle=handle, backend=pb.BACKEND_VLLM, release=True), timeout=60)


def _blob_server(port: int, nbytes: int, ready) -> None:
    """A gRPC server whose one method answers any request with ``nbytes`` bytes."""
    import asyncio

    import grpc

    async def serve():
        blob = bytes(nbytes)

        async def send(_request, _context):
            return blob

        handler = grpc.unary_unary_rpc_method_handler(send)
        server = grpc.aio.server(options=[("grpc.max_send_message_length", 1 << 30)])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("blob.Blob", {"Get": handler}),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    asyncio.run(serve())


def transport_ms(nbytes: int, repeat: int) -> float:
    """Median time to receive ``nbytes`` in one unary gRPC response over 127.0.0.1 with
    nothing else done: what moving a payload of that size costs at the least."""
    import multiprocessing

    import grpc

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_blob_server, args=(port, nbytes, ready), daemon=True)
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the transport probe server did not start")
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 1 << 30)]) as ch:
            get = ch.unary_unary("/blob.Blob/Get")
            return median_ms(lambda: get(b""), repeat)
    finally:
        proc.terminate()
        proc.join(10)


def _timed_flows(fn, repeat: int, after=None) -> float:
    """Median ms of ``fn()``; ``after(result)`` runs untimed (a worker reading its segment)."""
    after = after or (lambda _r: None)
    after(fn())
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = fn()
        times.append((time.perf_counter() - t0) * 1e3)
        after(r)
    return statistics.median(times)


def _consume(payload) -> None:
    """What the worker does with a shared-memory payload: read the segment, which removes it."""
    from smg_grpc_servicer import mm_shm

    td = payload.vllm.pixel_values
    if td.WhichOneof("payload") == "shm":
        mm_shm.tensor_payload_bytes(td)


def bench_transport(target: str, raw: bytes, repeat: int, inproc: float) -> dict:
    """Preprocess + Assemble(vLLM) of a new image over shared memory and inline in
    bfloat16, next to the float32 inline flow; each new image is the same picture with
    two other trailing bytes, so nothing comes from the cache."""
    from sglang_mm_grpc.client import Client, payload_options

    shm, bf16 = payload_options(transport="shm"), payload_options("bfloat16")
    fresh = iter(variant(raw, k) for k in range(1 << 20))
    out: dict = {}
    with Client(target) as c:
        server_ms: list[float] = []  # Preprocess's own total (timings.total_ms), staged SHM flow

        def two_phase(hint, options, record=False):
            def flow():
                r = c.preprocess(SERVER_MODEL, [next(fresh)], options=hint)
                if record:
                    server_ms.append(r.timings.total_ms)
                return c.assemble(r.handle, "vllm", options=options, release=True)
            return flow

        out["shm_staged_p50_ms"] = _timed_flows(two_phase(shm, shm, record=True), repeat, _consume)
        out["shm_staged_preprocess_server_p50_ms"] = statistics.median(server_ms[1:])
        out["shm_copied_p50_ms"] = _timed_flows(two_phase(None, shm), repeat, _consume)
        out["shm_one_shot_p50_ms"] = _timed_flows(
            lambda: c.preprocess(SERVER_MODEL, [next(fresh)], backend="vllm", options=shm).payload, repeat, _consume)
        out["inline_f32_p50_ms"] = _timed_flows(two_phase(None, None), repeat)
        out["inline_bf16_p50_ms"] = _timed_flows(two_phase(None, bf16), repeat)
        handle = c.preprocess(SERVER_MODEL, [next(fresh)]).handle
        out["inline_f32_bytes"] = c.assemble(handle, "vllm").ByteSize()
        out["inline_bf16_bytes"] = c.assemble(handle, "vllm", options=bf16).ByteSize()
        shm_payload = c.assemble(handle, "vllm", options=shm, release=True)
        out["shm_bytes"] = shm_payload.ByteSize()
        _consume(shm_payload)
        out["shm_counters"] = {k: v for k, v in (("written", c.server_info().shm.written),
                                                   ("handed_out", c.server_info().shm.handed_out))}
    out["shm_staged_over_inprocess"] = out["shm_staged_p50_ms"] / inproc
    return out


def _print_transport(out: dict, inproc: float) -> None:
    print(f"  Preprocess+Assemble(vLLM, SHM) p50 {out['shm_staged_p50_ms']:.1f} ms = "
          f"{out['shm_staged_over_inprocess']:.2f}x in-process ({inproc:.1f} ms; Preprocess's own total in the server "
          f"{out['shm_staged_preprocess_server_p50_ms']:.1f} ms): the pixels written by the kernels "
          f"into the segment Preprocess was asked to stage; {out['shm_copied_p50_ms']:.1f} ms when Assemble copies "
          f"them into a segment; one call with backend set {out['shm_one_shot_p50_ms']:.1f} ms; "
          f"the payload is {out['shm_bytes']} bytes", flush=True)
    print(f"  inline: float32 p50 {out['inline_f32_p50_ms']:.1f} ms for {out['inline_f32_bytes'] / 1e6:.1f} MB, "
          f"bfloat16 p50 {out['inline_bf16_p50_ms']:.1f} ms for {out['inline_bf16_bytes'] / 1e6:.1f} MB", flush=True)


def bench_server(repeat: int, seconds: float) -> dict:
    from sglang_mm_grpc import Preprocessor
    from sglang_mm_grpc.wire.assemble import assemble as build_payload
    from sglang_mm_grpc.client import Client

    raw = make_image("1280x720")
    pp = Preprocessor.from_model(SERVER_MODEL, cache_bytes=0)
    pp.warmup()
    inproc = median_ms(lambda: pp.preprocess([raw]), repeat)
    payload = build_payload(pp.preprocess([raw]), "vllm", pp.field_layout).message().ByteSize()
    out: dict = {"image": "1280x720", "inprocess_ms": inproc, "payload_bytes": payload,
                 "transport_ms": transport_ms(payload, repeat)}
    srv = _Server("--model", SERVER_MODEL, "--cache-bytes", "0")
    try:
        srv.wait_serving()
        with Client(srv.target) as c:
            out["p50_ms"] = median_ms(lambda: _two_phase(c, raw), repeat)
            out["one_shot_p50_ms"] = median_ms(lambda: c.preprocess(SERVER_MODEL, [raw], backend="vllm"), repeat)
        out["transport"] = bench_transport(srv.target, raw, repeat, inproc)
    finally:
        srv.stop()
    out["p50_over_inprocess"] = out["p50_ms"] / inproc
    print(f"  Preprocess+Assemble(vLLM) p50 {out['p50_ms']:.1f} ms vs in-process {inproc:.1f} ms "
          f"= {out['p50_over_inprocess']:.2f}x (one call with backend set: {out['one_shot_p50_ms']:.1f} ms); "
          f"gRPC alone moves the {payload / 1e6:.1f} MB payload in {out['transport_ms']:.1f} ms", flush=True)
    _print_transport(out["transport"], inproc)
    for cores, workers in (("0", 1), ("0,1", 2)):
        srv = _Server("--model", SERVER_MODEL, "--cache-bytes", "0", "--workers", str(workers), cores=cores)
        try:
            srv.wait_serving()
            for flow, assemble in (("two_phase", True), ("preprocess", False)):
                t = out[f"throughput_{flow}_{workers}core"] = _throughput(srv, raw, 8, seconds, assemble)
                print(f"  8 clients, server on {workers} core(s), {flow.replace('_', '-')}: {t['rps']:.1f} flows/s, "
                      f"server busy {t['server_cores_busy']:.2f} cores", flush=True)
        finally:
            srv.stop()
    for flow in ("two_phase", "preprocess"):
        ratio = out[f"scaling_{flow}"] = out[f"throughput_{flow}_2core"]["rps"] / out[f"throughput_{flow}_1core"]["rps"]
        print(f"  {flow.replace('_', '-')}: 2 cores / 1 core = {ratio:.2f}x", flush=True)
    print(f"  (the clients run on the same 2 cores; two-phase moves {payload / 1e6:.1f} MB per flow through gRPC)",
          flush=True)
    return out


def _client_process(target: str, raw: bytes, threads: int, seconds: float, assemble: bool, ready, start, results) -> None:
    """``threads`` closed-loop clients in one process: puts None on ``ready`` once warm,
    runs ``seconds`` after ``start``, then puts the number of flows done on ``results``."""
    from sglang_mm_grpc.server.allocator import tune_for_large_tensors
    from sglang_mm_grpc.client import Client

    tune_for_large_tensors()
    counts = [0] * threads

    def flow(c, assemble_bytes) -> None:
        handle = c.preprocess(SERVER_MODEL, [raw]).handle
        if assemble:
            assemble_bytes(handle)
        else:
            c.release(handle)

    clients = [Client(target) for _ in range(threads)]
    calls = [_assemble_bytes(c) for c in clients]
    for c, assemble_bytes in zip(clients, calls):
        flow(c, assemble_bytes)  # connect and warm outside the window
    ready.put(None)

    def worker(i: int, stop: float) -> None:
        while time.perf_counter() < stop:
            flow(clients[i], calls[i])
            counts[i] += 1

    start.wait()
    stop = time.perf_counter() + seconds
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(worker, range(threads), [stop] * threads))
    for c in clients:
        c.close()
    results.put(sum(counts))


def _throughput(srv: "_Server", raw: bytes, clients: int, seconds: float, assemble: bool) -> dict:
    """Closed-loop flows per second from ``clients`` clients in two processes (one Python
    process cannot drive a server that fast), and how many cores the server kept busy."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready, start, results = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_client_process,
                         args=(srv.target, raw, clients // 2, seconds, assemble, ready, start, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=300)
    server_cpu0, t0 = srv.cpu_s(), time.perf_counter()
    start.set()
    flows = sum(results.get(timeout=seconds + 120) for _ in procs)
    wall = time.perf_counter() - t0
    server_cores = (srv.cpu_s() - server_cpu0) / wall
    for p in procs:
        p.join(30)
    return {"rps": flows / wall, "server_cores_busy": server_cores}


def bench_startup(servers: int = 5) -> dict:
    """Cold start once; then ``servers`` warm starts, each timing its first ten requests
    (medians over the servers: one server's 1st request is a single noisy sample)."""
    from sglang_mm_grpc.client import Client

    raw = make_image("1280x720")
    out: dict = {"warm_servers": servers}
    warm, first, tenth, first_in, tenth_in = [], [], [], [], []
    with tempfile.TemporaryDirectory() as cache:
        env = {"NUMBA_CACHE_DIR": cache}
        srv = _Server(env=env)
        try:
            out["serving_cold_s"] = srv.wait_serving()
        finally:
            srv.stop()
        for _ in range(servers):
            srv = _Server(env=env)
            try:
                warm.append(srv.wait_serving())
                with Client(srv.target) as c:
                    c.list_models()  # connected
                    times, server_ms = [], []
                    for k in range(10):
                        fresh = variant(raw, k)  # new bytes each time: no cache hits
                        t0 = time.perf_counter()
                        r = c.preprocess(SERVER_MODEL, [fresh])
                        c.assemble(r.handle, "vllm", release=True)
                        times.append((time.perf_counter() - t0) * 1e3)
                        server_ms.append(r.timings.total_ms)
            finally:
                srv.stop()
            first.append(times[0])
            tenth.append(times[-1])
            first_in.append(server_ms[0])
            tenth_in.append(server_ms[-1])
    med = statistics.median
    out["serving_warm_s"] = med(warm)
    out["first_request_ms"], out["tenth_request_ms"] = med(first), med(tenth)
    out["first_preprocess_server_ms"], out["tenth_preprocess_server_ms"] = med(first_in), med(tenth_in)
    print(f"  SERVING (all presets): cold numba cache {out['serving_cold_s']:.1f} s, warm {out['serving_warm_s']:.1f} s; "
          f"Preprocess+Assemble of new 1280x720 images, medians over {servers} fresh servers: "
          f"1st {out['first_request_ms']:.1f} ms, 10th {out['tenth_request_ms']:.1f} ms (Preprocess inside the "
          f"server: {out['first_preprocess_server_ms']:.1f} vs {out['tenth_preprocess_server_ms']:.1f} ms)", flush=True)
    return out


def bench_cache(repeat: int) -> dict:
    from sglang_mm_grpc.client import Client

    srv = _Server("--model", SERVER_MODEL)
    out = {"image": "1920x1080"}
    try:
        srv.wait_serving()
        with Client(srv.target) as c:
            c.preprocess(SERVER_MODEL, [make_image("640x480")])  # connection warm-up
            firsts, repeats = [], []
            for k in range(max(3, repeat // 3)):
                raw = variant(make_image("1920x1080"), k)  # new bytes: a miss
                for times in (firsts, repeats, repeats, repeats):
                    t0 = time.perf_counter()
                    handle = c.preprocess(SERVER_MODEL, [raw]).handle
                    times.append((time.perf_counter() - t0) * 1e3)
                    c.release(handle)
    finally:
        srv.stop()
    out["first_ms"], out["repeat_ms"] = statistics.median(firsts), statistics.median(repeats)
    out["repeat_fraction"] = out["repeat_ms"] / out["first_ms"]
    print(f"  repeated 1920x1080 through the server: first {out['first_ms']:.1f} ms, repeat {out['repeat_ms']:.2f} ms "
          f"= {100 * out['repeat_fraction']:.1f}%", flush=True)
    return out


def bench_controls(repeat: int) -> dict:
    from sglang_mm_grpc import Preprocessor
    from sglang_mm_grpc.client import Client
    from sglang_mm_grpc.core.hashing import content_hash
    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

    srv = _Server("--model", SERVER_MODEL)
    out: dict = {"image": "1920x1080", "plan_image": "4032x3024"}
    photo = make_image("4032x3024")
    try:
        srv.wait_serving()
        with Client(srv.target) as c, Client(srv.target, media_ids="known") as ids:
            c.preprocess(SERVER_MODEL, [make_image("640x480")])  # connection warm-up
            ids.plan(SERVER_MODEL, [make_image("640x480")])
            firsts, by_bytes, by_id = [], [], []

            def timed(client, raw, times=None):
                t0 = time.perf_counter()
                handle = client.preprocess(SERVER_MODEL, [raw]).handle
                if times is not None:
                    times.append((time.perf_counter() - t0) * 1e3)
                client.release(handle)

            for k in range(max(5, repeat // 2)):
                raw = variant(make_image("1920x1080"), k)  # new bytes: a miss
                timed(c, raw, firsts)
                timed(c, raw, by_bytes)
                timed(ids, raw)  # the ids client's first sight of it: sent as bytes (untimed)
                timed(ids, raw, by_id)
                timed(ids, raw, by_id)
            plans_bytes, plans_id, server_bytes, server_id = [], [], [], []
            for k in range(max(5, repeat)):
                raw = variant(photo, k)  # new bytes each time: hashed and opened afresh
                t0 = time.perf_counter()
                r = c.plan(SERVER_MODEL, [raw])
                plans_bytes.append((time.perf_counter() - t0) * 1e3)
                server_bytes.append(r.timings.total_ms)
                item = pb.MediaItem(media_id=content_hash(raw))
                t0 = time.perf_counter()
                r = c.plan(SERVER_MODEL, [item])
                plans_id.append((time.perf_counter() - t0) * 1e3)
                server_id.append(r.timings.total_ms)
    finally:
        srv.stop()
    pp = Preprocessor.from_model(SERVER_MODEL, cache_bytes=0)
    digest = content_hash(photo)
    med = statistics.median
    out.update(first_ms=med(firsts), repeat_bytes_ms=med(by_bytes), repeat_id_ms=med(by_id),
               plan_bytes_ms=med(plans_bytes), plan_id_ms=med(plans_id), plan_bytes_server_ms=med(server_bytes),
               plan_id_server_ms=med(server_id), plan_bytes_mb=len(photo) / 1e6,
               plan_inprocess_ms=median_ms(lambda: pp.plan([photo], hashes=[digest]), repeat),
               plan_inprocess_hashing_ms=median_ms(lambda: pp.plan([photo]), repeat))
    out["repeat_id_fraction"] = out["repeat_id_ms"] / out["first_ms"]
    out["repeat_bytes_fraction"] = out["repeat_bytes_ms"] / out["first_ms"]
    print(f"  repeated 1920x1080 JPEG through the server: first {out['first_ms']:.1f} ms; again by media id "
          f"{out['repeat_id_ms']:.2f} ms = {100 * out['repeat_id_fraction']:.1f}% (by its bytes "
          f"{out['repeat_bytes_ms']:.2f} ms = {100 * out['repeat_bytes_fraction']:.1f}%)", flush=True)
    print(f"  Plan of a 4032x3024 JPEG ({out['plan_bytes_mb']:.1f} MB) through the server: by bytes "
          f"{out['plan_bytes_ms']:.2f} ms (server {out['plan_bytes_server_ms']:.2f} ms), by media id "
          f"{out['plan_id_ms']:.2f} ms (server {out['plan_id_server_ms']:.2f} ms); in-process "
          f"{out['plan_inprocess_ms']:.2f} ms with the hash known, {out['plan_inprocess_hashing_ms']:.2f} ms "
          "hashing it", flush=True)
    return out


_MEMORY_PROBE = """
import gc, sys
from pathlib import Path
from sglang_mm_grpc import Preprocessor
sys.path.insert(0, sys.argv[3])  # this script's directory
from bench import make_image

def status(key):
    for line in Path('/proc/self/status').read_text().splitlines():
        if line.startswith(key + ':'):
            return int(line.split()[1]) * 1024

pp = Preprocessor.from_model(sys.argv[1], cache_bytes=0); pp.warmup()
raw = make_image(sys.argv[2])
pp.preprocess([make_image('64x64')])
gc.collect()
Path('/proc/self/clear_refs').write_text('5')  # reset the peak (VmHWM) to the current RSS
before = status('VmRSS')
out = pp.preprocess([raw])
added = status('VmHWM') - before
size = out.pixel_values.nbytes + sum(t.nbytes for t in out.tensors.values())
print(added, size)
"""


def bench_memory(models) -> list[dict]:
    rows = []
    for model in models:
        for spec in ("1920x1080", "4032x3024"):
            res = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, model, spec, str(Path(__file__).resolve().parent)],
                                 capture_output=True, text=True,
                                 env={**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 << 10)})
            if res.returncode != 0:
                print(f"  {model} {spec}: probe failed: {res.stderr.strip().splitlines()[-1:]}")
                continue
            added, size = map(int, res.stdout.split())
            rows.append({"model": model, "image": spec, "rss_added_mb": added / 2**20, "output_mb": size / 2**20,
                         "ratio": added / size})
            print(f"  {model.split('/')[-1]:<26} {spec:<10} peak RSS +{added / 2**20:.0f} MB for "
                  f"{size / 2**20:.0f} MB of output = {added / size:.2f}x", flush=True)
    return rows


def chart(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['model'].split('/')[-1][:14]}\n{r['image']}" for r in rows]
    series = [("floor", "floor_ms"), ("ours", "ours_ms"), ("HF PIL", "hf_pil_ms"), ("HF torchvision", "hf_tv_ms")]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 1.1), 4.5))
    width = 0.2
    for k, (name, key) in enumerate(series):
        vals = [r.get(key, 0) for r in rows]
        ax.bar(np.arange(len(rows)) + (k - 1.5) * width, vals, width, label=name)
    ax.set_xticks(np.arange(len(rows)), labels, fontsize=7)
    ax.set_ylabel("ms per image (median, 1 thread)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("sglang-mm-grpc vs HF image processors (HF in its own process, calls interleaved; "
                 "floor = Pillow decode + one write)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _machine(malloc_tuned: bool) -> dict:
    import numba
    import PIL

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
            "numpy": np.__version__, "numba": numba.__version__, "pillow": PIL.__version__,
            "malloc_tuned": malloc_tuned, "load_average_at_start": list(os.getloadavg())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/bench.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", nargs="+",
                    default=["inprocess", "stages", "server", "startup", "cache", "controls", "memory"],
                    choices=["inprocess", "stages", "server", "startup", "cache", "controls", "memory"])
    ap.add_argument("--model", action="append", help=f"preset (repeatable; default {', '.join(MODELS)})")
    ap.add_argument("--images", nargs="+", default=IMAGES, help="WxH[:png|:photoQ] (default: %(default)s)")
    ap.add_argument("--hf-python", help="interpreter for the HF side of the in-process section (one with "
                    "transformers, and torch for the torchvision column; default: this one)")
    ap.add_argument("--stage-images", nargs="+", default=STAGE_IMAGES,
                    help="images of the stages section (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--no-amx", action="store_true", help="leave AMX tiles off in this process (serve --no-amx)")
    ap.add_argument("--seconds", type=float, default=10.0, help="throughput window per server")
    ap.add_argument("--quick", action="store_true", help="fewer repeats and shorter windows")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--chart", help="write a PNG chart of the in-process table here (needs matplotlib)")
    args = ap.parse_args(argv)
    repeat = 5 if args.quick else args.repeat
    seconds = 4.0 if args.quick else args.seconds
    models = args.model or MODELS
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    from sglang_mm_grpc.server.allocator import tune_for_large_tensors

    tuned = tune_for_large_tensors()  # as the server does: this process, the servers it starts
    results: dict = {"machine": _machine(tuned)}
    from sglang_mm_grpc.kernels import amx

    results["machine"]["amx_tiles"] = False if args.no_amx else amx.request()  # as the server does
    print(f"AMX tiles: {'on' if results['machine']['amx_tiles'] else 'off'}")
    if "inprocess" in args.sections:
        print("in-process, one thread, ms (median); floor = decode + write; /floor = ours / floor; x = HF / ours")
        print(INPROCESS_HEADER)
        meta: dict = {}
        results["inprocess"] = bench_inprocess(models, args.images, repeat, args.hf_python, meta)
        results["inprocess_hf_process"] = meta
        results["inprocess_summary"] = summarize_inprocess(results["inprocess"])
        _print_summary(results["inprocess_summary"])
    if "stages" in args.sections:
        print("per stage, one thread, ms (median of each stage timed alone, in turn with the whole call)")
        results["stages"] = bench_stages(models, args.stage_images, repeat)
    if "server" in args.sections:
        print("through the server (127.0.0.1)")
        results["server"] = bench_server(repeat, seconds)
    if "startup" in args.sections:
        print("start-up")
        results["startup"] = bench_startup(2 if args.quick else 5)
    if "cache" in args.sections:
        print("preprocessing cache")
        results["cache"] = bench_cache(repeat)
    if "controls" in args.sections:
        print("media ids and Plan")
        results["controls"] = bench_controls(repeat)
    if "memory" in args.sections:
        print("memory")
        results["memory"] = bench_memory(models)
    results["machine"]["load_average_at_end"] = list(os.getloadavg())
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.chart and results.get("inprocess"):
        try:
            chart(results["inprocess"], args.chart)
        except ImportError:
            print("(no chart: matplotlib is not installed; pip install 'sglang-mm-grpc[bench]')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
