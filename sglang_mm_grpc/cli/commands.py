"""Command line: ``sglang-mm-grpc preprocess | plan | models | serve | call`` (benchmarks: ``python scripts/bench.py``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from .call import add_call_parser
from .sidecar import add_sidecar_parser
from .remote import add_budget_argument, add_processor_argument, add_serve_parser, add_target_arguments, parse_ids
from .remote import add_client_security_arguments, add_image_options_arguments, add_media_ids_argument
from .remote import UnreadableFile, add_audio_arguments, add_video_arguments, audio_arguments, image_options_of
from .remote import UsageError, options_text, plain, print_audios, print_videos, read_files, say_error
from .remote import video_options_of


def _load_local(args):
    """(the model, the image files' bytes, the video files' bytes, the audio arguments) for
    a local preprocess or plan; None after saying why not."""
    from .. import Preprocessor, PreprocessError

    try:
        blobs, videos = read_files(args.images, "image"), read_files(args.videos, "video")
        audio = audio_arguments(args)
        # As a suffix, the processor is required of the model (an error if its family lacks it).
        budget = {"max_image_tokens": args.max_image_tokens} if args.max_image_tokens else {}
        pp = Preprocessor.from_model(f"{args.model}@{args.processor}" if args.processor else args.model, **budget)
        return pp, blobs, videos, audio
    except PreprocessError as e:
        say_error(e, args)
    except UnreadableFile as e:
        print(f"error: {e}", file=sys.stderr)
    return None


def _preprocess_local(args) -> int:
    from .. import PreprocessError

    loaded = _load_local(args)
    if loaded is None:
        return 1
    pp, blobs, videos, audio = loaded
    pp.warmup()
    t0 = time.perf_counter()
    try:
        out = pp.preprocess(blobs, input_ids=parse_ids(args.input_ids), options=image_options_of(args),
                            raw=args.pixel_dtype == "uint8", **_video_arguments(videos, args), **audio)
    except PreprocessError as e:
        say_error(e, args)
        return 1
    ms = (time.perf_counter() - t0) * 1e3
    for i, (path, im, t) in enumerate(zip(args.images, out.images, out.item_timings_ms)):
        grid = " grid " + "x".join(map(str, im.grid)) if im.grid else ""
        work = "cached" if t["cached"] else f"decode {t['decode_ms']:.1f} ms, process {t['process_ms']:.1f} ms"
        print(
            f"[{i}] {path}: HxW {im.height}x{im.width} -> {im.resized_height}x{im.resized_width}{grid}, "
            f"{im.token_count} tokens, blake3 {im.hash[:16]}, {work} ({options_text(im.options)})"
        )
    print_videos(args.videos, out.videos)
    print_audios(args.audios, out.audios)
    videos_text = "" if not videos else (
        f"; pixel_values_videos {out.pixel_values_videos.dtype} {list(out.pixel_values_videos.shape)}")
    print(
        f"{pp.info['reference_processor']}: "
        f"pixel_values {out.pixel_values.dtype} {list(out.pixel_values.shape)}{videos_text}; "
        f"{len(out.input_ids)} input ids; {ms:.1f} ms for {len(blobs)} image(s)"
        + (f" and {len(videos)} video(s)" if videos else "")
    )
    if args.out:
        arrays = {"pixel_values": out.pixel_values, "input_ids": out.input_ids, **out.tensors}
        if videos:
            arrays.update({"pixel_values_videos": out.pixel_values_videos, **out.video_tensors})
        arrays.update(out.audio_tensors)
        if out.positions is not None:
            arrays["mrope_positions"] = out.positions
            arrays["mrope_position_delta"] = np.array([out.rope_delta], dtype=np.int64)
        np.savez(args.out, **arrays)
        print(f"wrote {args.out}: {', '.join(arrays)}")
    return 0


def _plan_local(args) -> int:
    from .. import PreprocessError

    loaded = _load_local(args)
    if loaded is None:
        return 1
    pp, blobs, videos, audio = loaded
    try:
        out = pp.plan(blobs, input_ids=parse_ids(args.input_ids), options=image_options_of(args),
                      **_video_arguments(videos, args), **audio)
    except PreprocessError as e:
        say_error(e, args)
        return 1
    for i, (path, im) in enumerate(zip(args.images, out.images)):
        grid = " grid " + "x".join(map(str, im.grid)) if im.grid else ""
        print(f"[{i}] {path}: HxW {im.height}x{im.width} -> {im.resized_height}x{im.resized_width}{grid}, "
              f"{im.token_count} tokens at {im.structural_range[0]}, blake3 {im.hash[:16]} "
              f"({options_text(im.options)})")
    print_videos(args.videos, out.videos)
    print_audios(args.audios, out.audios)
    print(f"{out.input_ids_length} input ids; {sum(out.token_counts)} image tokens; "
          f"{out.timings_ms['total_ms']:.2f} ms (headers only, nothing decoded)")
    return 0


def _video_arguments(videos: list, args) -> dict:
    """``preprocess``/``plan`` keyword arguments for the videos (none without videos)."""
    return {"videos": videos, "video_options": video_options_of(args)} if videos else {}


def _models(args) -> int:
    from .. import Preprocessor
    from ..config import preset_names

    for name in preset_names():
        info = Preprocessor.from_model(name).info
        print(f"{name}\tfamily={info['family']}\tplaceholder_token_id={info['placeholder_token_id']}"
              f"\treference={info['reference_processor']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="sglang-mm-grpc", description=plain(__doc__))
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("preprocess", help="preprocess images (locally, or through a server with --target)")
    p.add_argument("--model", required=True, help="preset id, model directory, or (with --target) a served name")
    p.add_argument("--input-ids", help="comma-separated token ids with one placeholder per image (default: just the placeholders)")
    p.add_argument("--out", help="write every output array to this .npz")
    add_target_arguments(p, timeout=120.0, local=True)
    p.add_argument("--backend", choices=("sglang", "vllm", "trtllm", "tokenspeed"),
                   help="with --target: assemble this backend's payload")
    p.add_argument("--pixel-dtype", choices=("float32", "bfloat16", "float16", "uint8"),
                   help="with --backend: the pixel tensor's wire dtype (default: the backend's); uint8: raw pixels "
                   "for an engine that normalizes on the device (also locally)")
    add_processor_argument(p, "locally: ")
    add_budget_argument(p)
    add_image_options_arguments(p)
    add_media_ids_argument(p)
    add_client_security_arguments(p)
    add_video_arguments(p)
    add_audio_arguments(p)
    p.add_argument("images", nargs="*", metavar="IMAGE", help="image files (with --target also http(s)://, data:, file:// URLs)")
    p.set_defaults(func=_preprocess)

    q = sub.add_parser("plan", help="what preprocess would produce (sizes, grid, tokens, ranges), from the image "
                       "headers alone (locally, or through a server with --target)")
    q.add_argument("--model", required=True, help="preset id, model directory, or (with --target) a served name")
    q.add_argument("--input-ids", help="comma-separated token ids with one placeholder per image (default: just the placeholders)")
    add_target_arguments(q, timeout=120.0, local=True)
    add_processor_argument(q, "locally: ")
    add_budget_argument(q)
    add_image_options_arguments(q)
    add_media_ids_argument(q)
    add_client_security_arguments(q)
    add_video_arguments(q)
    add_audio_arguments(q)
    q.add_argument("images", nargs="*", metavar="IMAGE", help="image files (with --target also http(s)://, data:, file:// URLs)")
    q.set_defaults(func=_plan)

    m = sub.add_parser("models", help="list the built-in model presets")
    m.set_defaults(func=_models)

    add_serve_parser(sub)
    add_call_parser(sub)
    add_sidecar_parser(sub)
    return parser


def _preprocess(args) -> int:
    if not args.images and not args.videos and not args.audios:
        raise UsageError("give at least one IMAGE, --video or --audio")
    if args.target:
        if args.processor:
            raise UsageError("--processor is chosen when the server starts (serve --processor, or --model M@PROCESSOR)")
        from .remote import run_remote_preprocess

        return run_remote_preprocess(args)
    if args.backend:
        raise UsageError("--backend needs --target (a running server assembles backend payloads)")
    if args.pixel_dtype not in (None, "uint8"):
        raise UsageError("--pixel-dtype float32/bfloat16/float16 needs --target and --backend (a payload's wire dtype); "
                         "locally only uint8 (raw pixels) changes the output")
    if args.media_ids:
        raise UsageError("--media-ids needs --target (a server keeps the bytes the ids name)")
    return _preprocess_local(args)


def _plan(args) -> int:
    if not args.images and not args.videos and not args.audios:
        raise UsageError("give at least one IMAGE, --video or --audio")
    if args.target:
        if args.processor:
            raise UsageError("--processor is chosen when the server starts (serve --processor, or --model M@PROCESSOR)")
        from .remote import run_remote_plan

        return run_remote_plan(args)
    if args.media_ids:
        raise UsageError("--media-ids needs --target (a server keeps the bytes the ids name)")
    return _plan_local(args)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
