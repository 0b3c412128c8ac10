"""``sglang-mm-grpc vllm-sidecar``: the vLLM worker's media sidecar (sglang_mm_grpc.sidecar).

Flags and environment variables are the reference sidecar's where they mean the same
(``python -m smg_grpc_servicer.vllm.mm_sidecar``: ``--redis-url`` /
``SMG_VLLM_MM_REDIS_URL``, ``--namespace`` / ``SMG_VLLM_MM_SIDECAR_NAMESPACE``,
``--concurrency``, ``SMG_VLLM_MM_MAX_RESULT_BYTES``, vLLM's ``--mm-device-do-normalize``,
``--allowed-media-domains``, ``--allowed-local-media-path``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

from .remote import REQUEST_OPTIONS, VIDEO_OPTIONS, _add_options, _given, _ServeHelpFormatter, add_media_policy_arguments
from .remote import add_processor_argument, media_policy

#: The per-item limits the sidecar applies as serve does (ServerConfig's fields, by name).
IMAGE_LIMITS = tuple(o for o in REQUEST_OPTIONS if o[3] in ("max_image_pixels", "max_image_tokens"))
VIDEO_LIMITS = tuple(o for o in VIDEO_OPTIONS if o[3] != "max_videos")


def add_sidecar_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "vllm-sidecar", help="serve a vLLM worker's media jobs from Redis (the gateway's sidecar protocol v1)",
        description="Take the media jobs a vLLM worker started with --mm-processor redis queues in Redis, "
        "and answer them with its engine input (docs/SIDECAR.md).", formatter_class=_ServeHelpFormatter)
    p.add_argument("--model", required=True, help="preset id or model directory (the worker's checkpoint)")
    p.add_argument("--fingerprint", required=True, metavar="FILE",
                   help="JSON object with the worker's seven Fingerprint fields as its hello carries them (model, "
                   "vllm_version, dtype, video_backend, media_io_kwargs, mm_processor_kwargs, limit_per_prompt): "
                   "they name the key namespace and are checked on every job")
    p.add_argument("--redis-url", default=None,
                   help="Redis to serve (default: $SMG_VLLM_MM_REDIS_URL, else redis://127.0.0.1:6379/0)")
    p.add_argument("--namespace", default=None,
                   help="key namespace (default: $SMG_VLLM_MM_SIDECAR_NAMESPACE, else derived from the fingerprint)")
    p.add_argument("--concurrency", type=int, default=2, help="jobs processed at once (default 2)")
    p.add_argument("--mm-device-do-normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="the engine normalizes pixels on the device, so jobs get raw uint8 pixels (default: as "
                   "vLLM 0.33 decides: on where the model class supports it)")
    add_processor_argument(p)
    _add_options(add_media_policy_arguments(p), IMAGE_LIMITS + VIDEO_LIMITS)
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run_sidecar)
    return p


def run_sidecar(args) -> int:
    from smg_grpc_servicer.mm_sidecar_protocol import (
        DEFAULT_MAX_RESULT_BYTES, DEFAULT_REDIS_URL, ENV_MAX_RESULT_BYTES, ENV_NAMESPACE, ENV_REDIS_URL, Keys,
        resolve_namespace)
    from smg_grpc_servicer.vllm.media_refs import advertised_schemes

    from ..core.errors import PreprocessError
    from ..media.video import VideoLimits
    from ..sidecar.jobs import engine_for, fingerprint_from, load_model

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        fingerprint = fingerprint_from(json.loads(Path(args.fingerprint).read_text()))
        policy = media_policy(args)
        limits = _given(**{dest: getattr(args, dest) for _, _, _, dest, _ in IMAGE_LIMITS + VIDEO_LIMITS})
        video = {k.removeprefix("video_"): limits.pop(k) for k in list(limits) if k.startswith("video_")}
        model = load_model(args.model, args.processor or "torchvision", video_limits=VideoLimits(**video), **limits)
        engine = engine_for(model, fingerprint, advertised_schemes(policy.allowed_local_media_path),
                            args.mm_device_do_normalize)
        max_result = int(os.environ.get(ENV_MAX_RESULT_BYTES) or DEFAULT_MAX_RESULT_BYTES)
    except (OSError, ValueError, PreprocessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    redis_url = args.redis_url or os.environ.get(ENV_REDIS_URL) or DEFAULT_REDIS_URL
    keys = Keys.for_namespace(resolve_namespace(fingerprint, args.namespace or os.environ.get(ENV_NAMESPACE)))
    return asyncio.run(_serve(model, policy, engine, redis_url, keys, args.concurrency, max_result))


async def _serve(model, policy, engine, redis_url: str, keys, concurrency: int, max_result: int) -> int:
    from concurrent.futures import ThreadPoolExecutor

    import redis.asyncio as redis_asyncio

    from ..media import MediaFetcher
    from ..sidecar.jobs import JobRunner
    from ..sidecar.worker import Sidecar

    log = logging.getLogger("sglang_mm_grpc.sidecar")
    model.warmup()  # no job pays for compiling
    fetcher = MediaFetcher(policy)
    # No read timeout of the client's own: a BRPOP waits on purpose; each call is bounded.
    client = redis_asyncio.from_url(redis_url, decode_responses=False, socket_connect_timeout=1.0,
                                    socket_timeout=None)
    with ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="sidecar") as executor:
        sidecar = Sidecar(JobRunner(model, fetcher, engine, executor), client, keys, concurrency=concurrency,
                          max_result_bytes=max_result)
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)  # type: ignore[union-attr]
        log.info("sidecar for %s (%s pixels) on %s", engine.fingerprint.model, "raw uint8" if engine.raw else
                 "normalized", redis_url.rsplit("@", 1)[-1])
        try:
            await sidecar.run()
        except asyncio.CancelledError:
            log.info("stopping after %d job(s)", sidecar.jobs_done)
        finally:
            await fetcher.aclose()
            await client.aclose()
    return 0
