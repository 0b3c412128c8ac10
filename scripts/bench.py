#!/usr/bin/env python3
"""Benchmark: this project's preprocessing beside HF's processors and the cost floor.

Everything is measured in the same run, one thread, medians of repeated runs:
  decode     Pillow decode alone (open + load + RGB), the floor's first half
  write      writing the float32 output tensor once, the floor's second half
  ours       Preprocessor.preprocess (hash + decode + resize/normalize/patchify + layout)
  ours-post  the same after decode (family work only)
  hf-pil     HF's PIL-backend processor on the decoded image (decode included, as ours)
  hf-tv      HF's torchvision processor, when torch/torchvision are installed
Images are generated deterministically (smooth photo-like content, JPEG q90 / PNG).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time

import numpy as np
from PIL import Image, ImageOps

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

DEFAULT_SIZES = ["640x480", "1280x720", "1920x1080", "4032x3024", "2560x1440:png"]


def make_image(w: int, h: int, fmt: str) -> bytes:
    import imagegen

    arr = imagegen.pixels(h, w, seed=w * 31 + h, kind="smooth")
    b = io.BytesIO()
    if fmt == "png":
        Image.fromarray(arr).save(b, "PNG", compress_level=6)
    else:
        Image.fromarray(arr).save(b, "JPEG", quality=90)
    return b.getvalue()


def median_ms(fn, repeat: int, min_time: float = 0.0) -> float:
    fn()  # warm caches
    times = []
    start = time.perf_counter()
    while len(times) < repeat or (time.perf_counter() - start) < min_time:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= 10 * repeat:
            break
    return statistics.median(times)


def decode(raw: bytes) -> Image.Image:
    im = Image.open(io.BytesIO(raw))
    im.load()
    return im.convert("RGB") if im.mode != "RGB" else im


def hf_processors(model: str):
    """(pil, torchvision-or-None) reference processors for the preset, if transformers is installed."""
    try:
        import logging

        import transformers

        logging.getLogger("transformers").setLevel(logging.ERROR)
    except ImportError:
        return None, None
    from sglang_mm_grpc.config import resolve

    cfg = {k: v for k, v in resolve(model).preprocessor_config.items() if k not in ("image_processor_type", "processor_class")}
    pil = transformers.Qwen2VLImageProcessorPil(**cfg)
    try:
        import torchvision  # noqa: F401

        tv = transformers.Qwen2VLImageProcessor(**cfg)
    except Exception:
        tv = None
    return pil, tv


def run(models: list[str], sizes: list[str], repeat: int) -> list[dict]:
    from sglang_mm_grpc import Preprocessor
    from sglang_mm_grpc.media.decode import decode_image

    rows = []
    for model in models:
        pp = Preprocessor.from_model(model)
        pp.warmup()
        hf_pil, hf_tv = hf_processors(model)
        for spec in sizes:
            dims, _, fmt = spec.partition(":")
            w, h = map(int, dims.split("x"))
            raw = make_image(w, h, fmt or "jpeg")
            out = pp.preprocess([raw])
            img = decode_image(raw, item=0)
            plan = pp.family.plan(img.height, img.width, 0)
            buf = np.empty(plan.feature_shape, np.float32)
            row = {
                "model": model, "image": f"{w}x{h} {fmt or 'jpeg'}", "bytes": len(raw),
                "output_shape": list(out.pixel_values.shape),
                "decode_ms": median_ms(lambda: decode(raw), repeat),
                "write_ms": median_ms(lambda: buf.fill(1.0), repeat),
                "ours_ms": median_ms(lambda: pp.preprocess([raw]), repeat),
                "ours_post_decode_ms": median_ms(lambda: pp.family.process_item(img, plan, buf), repeat),
            }
            if hf_pil is not None:
                row["hf_pil_ms"] = median_ms(lambda: hf_pil(ImageOps.exif_transpose(Image.open(io.BytesIO(raw))), return_tensors="np"), max(3, repeat // 3))
            if hf_tv is not None:
                row["hf_tv_ms"] = median_ms(lambda: hf_tv(ImageOps.exif_transpose(Image.open(io.BytesIO(raw))), return_tensors="np"), max(3, repeat // 3))
            floor = row["decode_ms"] + row["write_ms"]
            row["floor_ms"] = floor
            row["ours_vs_floor"] = row["ours_ms"] / floor
            if "hf_pil_ms" in row:
                row["speedup_vs_hf_pil"] = row["hf_pil_ms"] / row["ours_ms"]
            if "hf_tv_ms" in row:
                row["speedup_vs_hf_tv"] = row["hf_tv_ms"] / row["ours_ms"]
            rows.append(row)
            print(_fmt_row(row), flush=True)
    return rows


HEADER = f"{'model':<28} {'image':<15} {'decode':>7} {'write':>6} {'ours':>7} {'post':>6} {'hf-pil':>7} {'hf-tv':>7} {'/floor':>7} {'xPIL':>6} {'xTV':>6}"


def _fmt_row(r: dict) -> str:
    def f(key, width, fmt="{:.1f}"):
        return (fmt.format(r[key]) if key in r else "-").rjust(width)

    return (f"{r['model'].split('/')[-1]:<28} {r['image']:<15} {f('decode_ms', 7)} {f('write_ms', 6)} {f('ours_ms', 7)} "
            f"{f('ours_post_decode_ms', 6, '{:.2f}')} {f('hf_pil_ms', 7)} {f('hf_tv_ms', 7)} {f('ours_vs_floor', 7, '{:.2f}x')} "
            f"{f('speedup_vs_hf_pil', 6, '{:.1f}x')} {f('speedup_vs_hf_tv', 6, '{:.1f}x')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="preset id (repeatable); default Qwen/Qwen2-VL-7B-Instruct")
    ap.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES, help="WxH[:png] (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    print("times in ms (median, one thread); /floor = ours / (decode + write); xPIL, xTV = HF time / ours")
    print(HEADER)
    rows = run(args.model or ["Qwen/Qwen2-VL-7B-Instruct"], args.sizes, args.repeat)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "python": sys.version.split()[0], "cpus": os.cpu_count()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
