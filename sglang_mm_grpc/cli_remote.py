"""Command line for the service: ``serve``, and ``preprocess --target`` through a server.

Hooked into ``sglang_mm_grpc.cli`` (``add_serve_parser``, ``run_remote_preprocess``);
also runnable on its own: ``python -m sglang_mm_grpc.cli_remote serve|preprocess ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

_URL = re.compile(r"^(https?://|data:|file://)", re.IGNORECASE)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def byte_size(text: str) -> int:
    """``536870912``, ``512MiB``, ``512M``, ``4KiB``, ``1.25GiB`` -> bytes (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r} (e.g. 512MiB)")
    unit = (m.group(2) or "")[:1].lower()
    number = m.group(1)
    if "." not in number:
        return int(number) * _UNITS[unit]
    return int(float(number) * _UNITS[unit])


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    """The ``serve`` subcommand. Unset options keep ``ServerConfig``'s defaults (the server
    module is only imported when serving, so other subcommands stay light)."""
    p = subparsers.add_parser(
        "serve",
        help="run the gRPC server",
        description="Serve MultimodalPreprocessor (plus gRPC health and reflection).",
    )
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 50061; 0 picks a free one)")
    p.add_argument(
        "--model", dest="models", action="append", default=[], metavar="M",
        help="preset id, model directory, or NAME=DIR (requests then say NAME), optionally "
        "suffixed @pil or @torchvision; repeatable; default: every built-in preset",
    )
    add_resample_argument(p)
    p.add_argument("--workers", type=int, help="CPU worker threads (default: one per core)")
    p.add_argument("--max-message-bytes", type=byte_size, metavar="SIZE", help="both message limits (default 512MiB)")
    p.add_argument("--max-receive-bytes", type=byte_size, metavar="SIZE", help="largest request (default 512MiB)")
    p.add_argument("--max-send-bytes", type=byte_size, metavar="SIZE", help="largest response (default 512MiB)")
    p.add_argument("--store-bytes", type=byte_size, metavar="SIZE", help="handle store capacity (default 2GiB)")
    p.add_argument("--store-items", type=int, metavar="N", help="handles kept at most (default 4096)")
    p.add_argument("--handle-ttl", type=float, metavar="S", help="seconds a handle lives after its last use (default 120)")
    p.add_argument("--cache-bytes", type=byte_size, metavar="SIZE", help="preprocessed images kept for repeats, all models together (default 1GiB; 0 disables)")
    p.add_argument("--grace", type=float, metavar="S", help="seconds in-flight requests get on SIGTERM (default 30)")
    p.add_argument(
        "--max-in-flight", type=positive_int, metavar="N",
        help="Preprocess/Assemble calls in flight at once; past it new ones get RESOURCE_EXHAUSTED "
        "at once (default: 16 per worker, at least 64)",
    )
    p.add_argument(
        "--metrics-port", type=int, metavar="PORT",
        help="serve Prometheus text on http://HOST:PORT/metrics (default: off; 0: off)",
    )
    f = p.add_argument_group("image sources and their limits (docs/MEDIA.md)")
    f.add_argument("--allowed-local-media-path", metavar="DIR", help="the only directory file:// and path sources may read (default: none)")
    f.add_argument(
        "--allowed-media-domains", dest="allowed_media_domains", nargs="+", action="append", metavar="HOST",
        help="fetch http(s) only from these hosts, checked on every redirect (space- or comma-separated, "
        "repeatable; default: any public host)",
    )
    f.add_argument("--allowed-media-domain", dest="allowed_media_domains", action="append", metavar="HOST", help=argparse.SUPPRESS)
    f.add_argument(
        "--allow-private-media-hosts", "--allow-private-hosts", dest="allow_private_hosts", action="store_true",
        help="allow loopback/private/link-local/... addresses (trusted networks and tests only)",
    )
    f.add_argument("--max-images", type=positive_int, metavar="N", help="images per request (default 64)")
    f.add_argument("--request-byte-budget", type=byte_size, metavar="SIZE", help="bytes of all of a request's sources together (default 1.25GiB)")
    f.add_argument("--max-remote-bytes", type=byte_size, metavar="SIZE", help="largest fetched image (default 64MiB)")
    f.add_argument("--fetch-timeout", type=float, metavar="S", help="seconds per fetch, capped by the request deadline (default: $REQUEST_TIMEOUT or 3)")
    f.add_argument("--max-redirects", type=int, metavar="N", help="redirects followed per fetch (default 10)")
    f.add_argument("--max-concurrent-fetches", type=positive_int, metavar="N", help="fetches in flight across all requests (default 32)")
    f.add_argument("--max-image-pixels", type=positive_int, metavar="N", help="largest width x height decoded, checked from the header (default 67108864 = 8192x8192)")
    p.add_argument(
        "--malloc-defaults", action="store_true",
        help="leave glibc malloc as it is (default: tuned so freed tensors are reused, see docs/SERVICE.md)",
    )
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run_serve)
    return p


def add_resample_argument(p, where: str = "") -> None:
    """``--resample`` (``where`` starts its help: the local ``preprocess`` says "locally: ")."""
    p.add_argument(
        "--resample", choices=("pil", "torchvision"),
        help=f"{where}which transformers processor to reproduce where a family offers both (Qwen-VL: "
        "torchvision = Qwen2VLImageProcessor, as vLLM/SGLang with the fast processor); default pil",
    )


def run_serve(args) -> int:
    from .media import FetchPolicy
    from .server import ServerConfig, run

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        policy = FetchPolicy.from_env(**_given(
            allowed_local_media_path=args.allowed_local_media_path,
            allowed_media_domains=_domains(args.allowed_media_domains),
            allow_private_hosts=args.allow_private_hosts or None,
            max_items=args.max_images,
            request_byte_budget=args.request_byte_budget,
            max_remote_bytes=args.max_remote_bytes,
            fetch_timeout_s=args.fetch_timeout,
            max_redirects=args.max_redirects,
            max_concurrent_fetches=args.max_concurrent_fetches,
        ))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    config = ServerConfig(models=list(args.models), fetch_policy=policy, tune_malloc=not args.malloc_defaults, **_given(
        resample=args.resample,
        max_image_pixels=args.max_image_pixels,
        cache_bytes=args.cache_bytes,
        host=args.host,
        port=args.port,
        workers=args.workers,
        max_receive_bytes=args.max_message_bytes or args.max_receive_bytes,
        max_send_bytes=args.max_message_bytes or args.max_send_bytes,
        store_bytes=args.store_bytes,
        store_items=args.store_items,
        handle_ttl_s=args.handle_ttl,
        grace_s=args.grace,
        max_in_flight=args.max_in_flight,
        metrics_port=args.metrics_port,
    ))
    return run(config)


def _domains(values) -> list[str] | None:
    """``--allowed-media-domains a b,c --allowed-media-domain d`` -> [a, b, c, d]."""
    if values is None:
        return None
    flat = []
    for value in values:
        for entry in value if isinstance(value, list) else [value]:
            flat += [d for d in entry.split(",") if d.strip()]
    return flat


def _given(**options) -> dict:
    """Only the options set on the command line (the rest keep their defaults)."""
    return {k: v for k, v in options.items() if v is not None}


def add_remote_preprocess_parser(subparsers) -> argparse.ArgumentParser:
    """``preprocess --target`` on its own (``cli.py`` has the combined local/remote one)."""
    p = subparsers.add_parser("preprocess", help="preprocess images through a running server")
    p.add_argument("--target", required=True, help="HOST:PORT of the server")
    p.add_argument("--model", required=True, help="a served model name (see ListModels)")
    p.add_argument("--backend", choices=("sglang", "vllm", "trtllm"), help="assemble this backend's payload")
    p.add_argument("--input-ids", help="comma-separated token ids, one placeholder per image")
    p.add_argument("--out", help="write the payload's tensors and input_ids to this .npz")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline in seconds")
    p.add_argument("images", nargs="+", metavar="SOURCE", help="image file, or http(s)://, data:, file:// URL")
    p.set_defaults(func=run_remote_preprocess)
    return p


def run_remote_preprocess(args) -> int:
    """One call through a server. Plain paths are read here; URLs go as strings.

    Reads ``args``: target, model, images, backend (None: no payload), input_ids
    (comma-separated text or None), out, timeout (optional).
    """
    import grpc
    import numpy as np

    from .client import Client, payload_arrays

    try:
        sources = [s if _URL.match(s) else Path(s).read_bytes() for s in args.images]
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ids = parse_ids(getattr(args, "input_ids", None))
    backend = getattr(args, "backend", None)
    with Client(args.target, timeout=getattr(args, "timeout", None) or 120.0) as client:
        try:
            resp = client.preprocess(args.model, sources, input_ids=ids, backend=backend)
            if resp.handle and not backend:
                client.release(resp.handle)  # nothing will assemble it
        except grpc.RpcError as e:
            print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1

    for i, (src, im) in enumerate(zip(args.images, resp.images)):
        print(
            f"[{i}] {src if len(src) < 80 else src[:77] + '...'}: {im.height}x{im.width} -> "
            f"{im.resized_height}x{im.resized_width} tokens {im.token_count} "
            f"at {im.structural_range.offset} blake3 {im.hash[:16]}"
        )
    t = resp.timings
    print(
        f"{len(resp.input_ids)} input ids; fetch {t.fetch_ms:.1f} ms, decode {t.decode_ms:.1f} ms, "
        f"process {t.process_ms:.1f} ms, total {t.total_ms:.1f} ms (server side)"
    )
    if backend:
        arrays = payload_arrays(resp.payload)
        shapes = {k: f"{v.dtype}{list(v.shape)}" for k, v in arrays.items()}
        print(f"{backend} payload: {json.dumps(shapes)}")
    else:
        arrays = {"input_ids": np.asarray(resp.input_ids, dtype=np.int64)}
    if args.out:
        np.savez(args.out, **arrays)
        print(f"wrote {args.out}: {', '.join(arrays)}")
    return 0


def parse_ids(value):
    """``--input-ids`` text (``"1, 2,3"``) -> [1, 2, 3]; None and lists pass through."""
    if value is None or isinstance(value, (list, tuple)):
        return value
    try:
        return [int(t) for t in str(value).replace(" ", "").split(",") if t]
    except ValueError:
        raise SystemExit(f"--input-ids must be comma-separated integers, got {value!r}") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_mm_grpc.cli_remote", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(sub)
    add_remote_preprocess_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
