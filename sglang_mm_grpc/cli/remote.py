"""Command line for the service: ``serve``, and ``preprocess --target`` through a server.

Hooked into ``sglang_mm_grpc.cli`` (``add_serve_parser``, ``run_remote_preprocess``,
``run_remote_plan``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..core.errors import PreprocessError

# Sent to the server as they are (it refuses schemes it does not fetch); the rest are files read here.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://|data:)")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}



def plain(doc: str | None) -> str:
    """A docstring as help text: without reStructuredText's double backticks."""
    return (doc or "").replace("``", "")


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


# The serve options that set one ServerConfig field (SERVER_OPTIONS) or one FetchPolicy
# field (FETCH_OPTIONS), each named by its field: (flag, type, metavar, field, help).
# "{default}" in a help string is the field's default as defined there (serve_defaults),
# filled in only when help is shown.
SERVER_OPTIONS = (
    ("--host", str, "HOST", "host", "address to listen on (default {default})"),
    ("--port", int, "PORT", "port", "port (default {default}; 0 picks a free one)"),
    ("--workers", int, "N", "workers", "CPU worker threads (default: one per core)"),
    ("--max-receive-bytes", byte_size, "SIZE", "max_receive_bytes", "largest request (default {default})"),
    ("--max-send-bytes", byte_size, "SIZE", "max_send_bytes", "largest response (default {default})"),
    ("--store-bytes", byte_size, "SIZE", "store_bytes", "handle store capacity (default {default})"),
    ("--store-items", int, "N", "store_items", "handles kept at most (default {default})"),
    ("--handle-ttl", float, "S", "handle_ttl_s", "seconds a handle lives after its last use (default {default})"),
    ("--cache-bytes", byte_size, "SIZE", "cache_bytes",
     "preprocessed images kept for repeats, all models together (default {default}; 0 disables)"),
    ("--media-store-bytes", byte_size, "SIZE", "media_store_bytes",
     "encoded images kept by blake3 so requests can name them by media id instead of sending them again "
     "(default {default}; 0: none kept, every media id answers NOT_FOUND; docs/REQUESTS.md)"),
    ("--media-store-redis", str, "URL", "media_store_redis",
     "also keep media ids in this Redis (redis://HOST:PORT/DB, rediss:// or unix://), so an id sent to one replica "
     "resolves on every replica using it: written behind each request, read only for ids not held here, "
     "verified by their blake3 (default: off; needs the media-redis extra; docs/SERVICE.md)"),
    ("--media-store-redis-ttl", float, "S", "media_store_redis_ttl_s",
     "seconds each Redis key lives after its last write (default {default})"),
    ("--media-store-redis-timeout", float, "S", "media_store_redis_timeout_s",
     "seconds a lookup of ids not held here may take, within the request's deadline; past it they are "
     "NOT_FOUND and Redis is left alone for a second (default {default})"),
    ("--media-store-redis-namespace", str, "NS", "media_store_redis_namespace",
     "keys under sglang-mm:media:v1:NS: (replicas sharing ids use the same one; default \"{default}\")"),
    ("--grace", float, "S", "grace_s", "seconds in-flight requests get on SIGTERM (default {default})"),
    ("--max-in-flight", positive_int, "N", "max_in_flight",
     "Preprocess/Assemble calls in flight at once; past it new ones get RESOURCE_EXHAUSTED at once "
     "(default: {default})"),
    ("--metrics-port", int, "PORT", "metrics_port",
     "serve Prometheus text on http://METRICS_HOST:PORT/metrics (default: off; 0: off); with "
     "--auth-token-* a scrape needs the token, with --tls-* it is HTTPS with the same certificate"),
    ("--metrics-host", str, "HOST", "metrics_host",
     "address the metrics endpoint listens on, whatever --host is (default {default}: this machine only; "
     "the counters reveal traffic and model names)"),
)
FETCH_OPTIONS = (
    ("--request-byte-budget", byte_size, "SIZE", "request_byte_budget",
     "bytes of all of a request's sources together (default {default})"),
    ("--max-remote-bytes", byte_size, "SIZE", "max_remote_bytes", "largest fetched image (default {default})"),
    ("--fetch-timeout", float, "S", "fetch_timeout_s",
     "seconds per fetch, capped by the request deadline (default: $REQUEST_TIMEOUT or {default})"),
    ("--max-redirects", int, "N", "max_redirects", "redirects followed per fetch (default {default})"),
    ("--max-concurrent-fetches", positive_int, "N", "max_concurrent_fetches",
     "fetches in flight across all requests (default {default})"),
)
# ServerConfig fields, listed with the image-source options they belong with.
REQUEST_OPTIONS = (
    ("--max-images", positive_int, "N", "max_images",
     "images per request, checked before anything is fetched (default {default})"),
    ("--max-image-pixels", positive_int, "N", "max_image_pixels",
     "largest width x height decoded, checked from the header (default {default})"),
    ("--max-image-tokens", positive_int, "N", "max_image_tokens",
     "most tokens one image may expand into, per model (a request may ask for fewer); checked from the "
     "header, before decoding (default {default})"),
    ("--max-input-ids", positive_int, "N", "max_input_ids",
     "token ids per request, as sent and as expanded, checked from the length alone (default {default}; "
     "above the longest context a preset's model serves)"),
)
# ServerConfig fields of the video limits (docs/VIDEO.md), each named in its error.
VIDEO_OPTIONS = (
    ("--max-videos", positive_int, "N", "max_videos", "videos per request (default {default})"),
    ("--max-video-tokens", positive_int, "N", "max_video_tokens",
     "most tokens one video may expand into, per model (a request may ask for fewer); checked from the "
     "container header, before decoding (default {default})"),
    ("--video-max-bytes", byte_size, "SIZE", "video_max_bytes",
     "largest video, whatever its source; a streamed body is cut off at it (default {default})"),
    ("--video-max-duration", float, "S", "video_max_duration_s", "longest video, seconds (default {default})"),
    ("--video-max-decoded-frames", positive_int, "N", "video_max_decoded_frames",
     "frames decoded per video (default {default})"),
    ("--video-max-sampled-frames", positive_int, "N", "video_max_sampled_frames",
     "frames sampled per video (default {default})"),
    ("--video-max-frame-pixels", positive_int, "N", "video_max_frame_pixels",
     "largest width x height of a video frame (default {default})"),
    ("--video-decode-timeout", float, "S", "video_decode_timeout_s",
     "seconds of decoding per video, within the request deadline (default {default})"),
)
# ServerConfig fields of the audio limits (docs/AUDIO.md), each named in its error.
AUDIO_OPTIONS = (
    ("--max-audios", positive_int, "N", "max_audios", "audio clips per request (default {default})"),
    ("--max-audio-tokens", positive_int, "N", "max_audio_tokens",
     "most tokens one clip may expand into, per model (default {default})"),
    ("--audio-max-bytes", byte_size, "SIZE", "audio_max_bytes",
     "largest audio file, whatever its source; a streamed body is cut off at it (default {default})"),
    ("--audio-max-duration", float, "S", "audio_max_duration_s",
     "longest clip, seconds, from its header and while decoding (default {default})"),
    ("--audio-max-sample-rate", positive_int, "HZ", "audio_max_sample_rate", "highest sample rate (default {default})"),
    ("--audio-max-channels", positive_int, "N", "audio_max_channels", "most channels (default {default})"),
    ("--audio-max-decoded-samples", positive_int, "N", "audio_max_decoded_samples",
     "samples x channels decoded per clip (default {default})"),
    ("--audio-decode-timeout", float, "S", "audio_decode_timeout_s",
     "seconds of decoding per clip, within the request deadline (default {default})"),
)


def transport_name(text: str) -> str:
    value = text.strip().lower()
    if value not in ("inline", "shm", "auto"):
        raise argparse.ArgumentTypeError(f"not a tensor transport: {text!r} (inline, shm or auto)")
    return value


def octal_mode(text: str) -> int:
    try:
        value = int(text, 8)
    except ValueError:
        value = -1
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError(f"not a file mode: {text!r} (octal, e.g. 600 or 640)")
    return value


# ServerConfig fields of the payload tensors' transport (docs/WIRE_CURRENT.md).
SHM_OPTIONS = (
    ("--tensor-transport", transport_name, "MODE", "tensor_transport",
     "how payload tensors travel to vLLM and TokenSpeed workers when a request does not say: inline, shm "
     "(/dev/shm segments, for workers that share it) or auto (shm when the request's shm_namespace_id equals "
     "this server's) (default: {default})"),
    ("--shm-min-bytes", byte_size, "SIZE", "shm_min_bytes", "tensors smaller than this stay inline (default: {default})"),
    ("--shm-budget", byte_size, "SIZE", "shm_budget_bytes",
     "most bytes this server keeps in /dev/shm at once; a tensor that does not fit goes inline "
     "(default: {default}; 0: no shared memory)"),
    ("--shm-lease", float, "S", "shm_lease_s",
     "seconds a handed-out segment may stay unread before the server removes it (default {default})"),
    ("--shm-mode", octal_mode, "MODE", "shm_mode", "file mode of the segments, octal (default {default})"),
    ("--shm-owner-id", str, "ID", "shm_owner_id",
     "names this server's segments; a restart with the same id removes what the previous instance left "
     "(default: {default})"),
)


# ServerConfig fields of several processes, replicas, the drain and TLS (docs/SERVICE.md).
DEPLOY_OPTIONS = (
    ("--processes", positive_int, "N", "processes",
     "server processes sharing the port (SO_REUSEPORT); each warms up before the port reports SERVING, "
     "the first compiles the kernels for the others (default {default}; see docs/SERVICE.md)"),
    ("--replica-id", str, "ID", "replica_id",
     "names this replica inside every handle, so Assemble/Release can find the owner (default: HOST-PORT)"),
    ("--drain-delay", float, "S", "drain_delay_s",
     "seconds the port keeps serving after SIGTERM while health says NOT_SERVING, so routers move away "
     "first; then new calls get UNAVAILABLE and calls in flight get --grace (default {default})"),
    ("--tls-cert", str, "PEM", "tls_cert", "serve TLS with this certificate chain (with --tls-key)"),
    ("--tls-key", str, "PEM", "tls_key", "the private key of --tls-cert"),
    ("--tls-client-ca", str, "PEM", "tls_client_ca",
     "require client certificates signed by this CA (mTLS; needs --tls-cert)"),
)


def add_token_arguments(p, who: str) -> None:
    """``--auth-token-file`` / ``--auth-token-env`` (``who``: what the token is for)."""
    p.add_argument("--auth-token-file", metavar="FILE",
                   help=f"{who} bearer token(s) in this file (one per line)")
    p.add_argument("--auth-token-env", metavar="VAR",
                   help=f"{who} bearer token in this environment variable")


#: The server every client command talks to when ``--target`` is not given.
ENV_TARGET = "SGLANG_MM_GRPC_TARGET"
#: Where ``call`` goes without either (``serve``'s default port).
DEFAULT_TARGET = "127.0.0.1:50061"


def add_target_arguments(p, timeout: float, local: bool) -> None:
    """``--target`` (default ``$SGLANG_MM_GRPC_TARGET``) and ``--timeout``. With ``local``
    (a command that can work in-process) no server given means in-process, and
    ``--in-process`` ignores the variable; otherwise the fallback is ``DEFAULT_TARGET``."""
    env = os.environ.get(ENV_TARGET) or None
    now = f"; now {env}" if env else ""
    if local:
        p.add_argument("--target", default=env, help=f"HOST:PORT of a running server (default: ${ENV_TARGET}{now}); "
                       "without either the work is done in-process")
        p.add_argument("--in-process", dest="target", action="store_const", const=None,
                       help=f"do the work in this process even when ${ENV_TARGET} is set")
    else:
        p.add_argument("--target", default=env or DEFAULT_TARGET,
                       help=f"HOST:PORT of the server (default: ${ENV_TARGET}, else {DEFAULT_TARGET}{now})")
    p.add_argument("--timeout", type=float, default=timeout, help="deadline in seconds (default %(default)s)"
                   + (", with a server" if local else ""))


def add_client_security_arguments(p) -> None:
    """What ``preprocess --target`` needs to reach a server with TLS and/or a token."""
    g = p.add_argument_group("with --target: TLS and authentication (docs/SERVICE.md)")
    g.add_argument("--tls", action="store_true", help="use TLS, trusting the system's CAs (implied by --tls-ca)")
    g.add_argument("--tls-ca", metavar="PEM", help="trust this CA for the server's certificate")
    g.add_argument("--tls-cert", metavar="PEM", help="client certificate for mTLS (with --tls-key)")
    g.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    g.add_argument("--tls-server-name", metavar="NAME", help="expect this name in the server's certificate")
    add_token_arguments(g, "send the")


def client_security(args) -> dict:
    """``Client`` keyword arguments from ``add_client_security_arguments``'s options."""
    from ..server.gate import load_tokens

    tokens = load_tokens(getattr(args, "auth_token_file", None), getattr(args, "auth_token_env", None))
    return dict(
        tls=bool(getattr(args, "tls", False) or getattr(args, "tls_ca", None) or getattr(args, "tls_cert", None)),
        tls_ca=getattr(args, "tls_ca", None), tls_cert=getattr(args, "tls_cert", None),
        tls_key=getattr(args, "tls_key", None), tls_server_name=getattr(args, "tls_server_name", None),
        token=tokens[0].decode() if tokens else None,
    )


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    """The ``serve`` subcommand. Unset options keep ``ServerConfig``'s and ``FetchPolicy``'s
    defaults; the help shows them, read from those classes only when help is asked for (the
    server module imports grpc), so building the parser stays light."""
    p = subparsers.add_parser(
        "serve",
        help="run the gRPC server",
        description="Serve MultimodalPreprocessor (plus gRPC health and reflection).",
        epilog="built-in presets (served when no --model is given; nothing is downloaded): {presets}",
        formatter_class=_ServeHelpFormatter,
    )
    _add_options(p, SERVER_OPTIONS[:2])  # host, port
    p.add_argument(
        "--model", dest="models", action="append", default=[], metavar="M",
        help="preset id, model directory, or NAME=DIR (requests then say NAME), optionally "
        "suffixed @pil or @torchvision; repeatable; default: every built-in preset",
    )
    add_processor_argument(p)
    p.add_argument("--max-message-bytes", type=byte_size, metavar="SIZE",
                   help="both message limits at once (--max-receive-bytes and --max-send-bytes)")
    _add_options(p, SERVER_OPTIONS[2:])
    f = add_media_policy_arguments(p)
    _add_options(f, REQUEST_OPTIONS)
    _add_options(p.add_argument_group("videos (docs/VIDEO.md; each limit is named in its error)"), VIDEO_OPTIONS)
    _add_options(p.add_argument_group("audio (docs/AUDIO.md; each limit is named in its error)"), AUDIO_OPTIONS)
    _add_options(p.add_argument_group("payload tensors: dtype and shared memory (docs/WIRE_CURRENT.md)"), SHM_OPTIONS)
    d = p.add_argument_group("processes, replicas, drain, TLS and authentication (docs/SERVICE.md)")
    _add_options(d, DEPLOY_OPTIONS)
    add_token_arguments(d, "require a")
    p.add_argument(
        "--media-store-redis-env", metavar="VAR",
        help="the --media-store-redis URL from this environment variable instead, so a password in it stays out "
        "of the process list (e.g. a Kubernetes secret)",
    )
    p.add_argument(
        "--no-client-media-ids", dest="no_client_media_ids", action="store_true",
        help="refuse client-chosen media ids (bind_id, and media_id other than a blake3 hash); hashes still work "
        "(default: client ids are on, each bound for the caller that bound it: docs/REQUESTS.md)",
    )
    p.add_argument(
        "--shared-media-store", dest="shared_media_store", action="store_true",
        help="media ids by hash and preprocessing-cache hits (ImageInfo.cached) for every caller, as for one "
        "tenant with many routers (default: only for the caller that sent the bytes, so no caller can tell "
        "which images another sent: docs/REQUESTS.md)",
    )
    _add_process_settings(p)
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run_serve)
    return p


def _add_process_settings(p) -> None:
    """Settings of the server's whole process that it changes unless told not to."""
    p.add_argument(
        "--malloc-defaults", action="store_true",
        help="leave glibc malloc as it is (default: tuned so freed tensors are reused, see docs/SERVICE.md)",
    )
    p.add_argument(
        "--no-amx", dest="no_amx", action="store_true",
        help="do not ask Linux for AMX tiles: the resize kernels use AVX-512 only (default: AMX where the CPU "
        "has it, see docs/SERVICE.md)",
    )


def add_media_policy_arguments(p) -> argparse._ArgumentGroup:
    """Where media may come from and the fetch limits (``media_policy`` reads them)."""
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
        help="allow loopback/private/link-local/... addresses (trusted networks and tests only; cloud metadata "
        "addresses stay refused)",
    )
    f.add_argument(
        "--allow-metadata-media-hosts", dest="allow_metadata_hosts", action="store_true",
        help="also allow the cloud metadata addresses 169.254.169.254, fd00:ec2::254 and 100.100.100.200 "
        "(never needed for images)",
    )
    _add_options(f, FETCH_OPTIONS)
    return f


def _add_options(group, options) -> None:
    for flag, kind, metavar, dest, text in options:
        group.add_argument(flag, type=kind, metavar=metavar, dest=dest, help=text)


class _ServeHelpFormatter(argparse.HelpFormatter):
    """Puts each option's real default where its help says ``{default}``, and the preset
    ids where the epilog says ``{presets}`` (read only when help is shown)."""

    def _get_help_string(self, action):
        text = super()._get_help_string(action)
        return text.replace("{default}", serve_defaults()[action.dest]) if text and "{default}" in text else text

    def _format_text(self, text):
        if "{presets}" in text:
            from ..config import preset_names

            text = text.replace("{presets}", ", ".join(preset_names()))
        return super()._format_text(text)


@functools.lru_cache(maxsize=1)
def serve_defaults() -> dict[str, str]:
    """Field name -> its default as ``serve --help`` shows it, read from where it is
    defined: ServerConfig, FetchPolicy, and admission for the in-flight limit."""
    from ..service.admission import default_max_in_flight
    from ..media.policy import DEFAULT_FETCH_TIMEOUT_S, FetchPolicy
    from ..server.app import ServerConfig

    values: dict[str, Any] = {f.name: f.default for cls in (ServerConfig, FetchPolicy) for f in dataclasses.fields(cls)}
    values["fetch_timeout_s"] = DEFAULT_FETCH_TIMEOUT_S  # a default_factory ($REQUEST_TIMEOUT or this)
    shown = {}
    for _, kind, _, name, _ in (*SERVER_OPTIONS, *FETCH_OPTIONS, *REQUEST_OPTIONS, *VIDEO_OPTIONS, *AUDIO_OPTIONS):
        value = values[name]
        shown[name] = size_text(value) if kind is byte_size else f"{value:g}" if kind is float else str(value)
    side = math.isqrt(values["max_image_pixels"])
    if side * side == values["max_image_pixels"]:
        shown["max_image_pixels"] += f" = {side}x{side}"
    shown["max_in_flight"] = _in_flight_rule(default_max_in_flight)
    from ..wire.shm import DEFAULT_BUDGET_CAP, DEFAULT_MIN_BYTES
    from ..service.transport import ENV_MIN_BYTES, ENV_TRANSPORT, default_transport

    shown["tensor_transport"] = f"${ENV_TRANSPORT}, else {default_transport(env={})}"
    shown["shm_min_bytes"] = f"${ENV_MIN_BYTES}, else {size_text(DEFAULT_MIN_BYTES)}"
    shown["shm_budget_bytes"] = f"a quarter of /dev/shm, at most {size_text(DEFAULT_BUDGET_CAP)}"
    shown["shm_lease_s"] = f"{values['shm_lease_s']:g}"
    shown["shm_mode"] = f"{values['shm_mode']:o}"
    shown["shm_owner_id"] = "HOST-PORT"
    shown["processes"] = str(values["processes"])
    shown["drain_delay_s"] = f"{values['drain_delay_s']:g}"
    return shown


def _in_flight_rule(limit) -> str:
    """``limit(workers)`` in words: "16 per worker, at least 64" when it has that form."""
    per_worker, floor = limit(1 << 20) >> 20, limit(1)
    if all(limit(w) == max(floor, per_worker * w) for w in range(1, 257)):
        return f"{per_worker} per worker, at least {floor}"
    return ", ".join(f"{limit(w)} with {w} worker{'s' if w > 1 else ''}" for w in (1, 4, 16, 64))


def size_text(n: int) -> str:
    """Bytes in the largest binary unit that keeps at most two decimals, as ``byte_size``
    reads them back: ``2GiB``, ``1.25GiB``, ``64MiB``, ``1000``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n * 100 % scale == 0:
            return f"{n / scale:g}{unit}"
    return str(n)


def add_processor_argument(p, where: str = "") -> None:
    """``--processor`` (``where`` starts its help: the local ``preprocess`` says "locally: ");
    ``--resample``, its former name, still works."""
    p.add_argument(
        "--processor", "--resample", dest="processor", choices=("pil", "torchvision"),
        help=f"{where}which transformers image processor class to reproduce where a family offers both "
        "(Qwen-VL: torchvision = Qwen2VLImageProcessor, as vLLM/SGLang with the fast processor; Inkling: "
        "pil = Pillow's resize, as SGLang's own processor); default: the family's own (pil; Inkling: torchvision)",
    )


def add_budget_argument(p) -> None:
    """``--max-image-tokens`` of ``preprocess``: this request's token budget per image."""
    p.add_argument("--max-image-tokens", type=positive_int, metavar="N",
                   help="most tokens one image may expand into: with --target this request's budget "
                   "(default: the model's; a larger value is the model's), locally the model's "
                   "(default: as serve --max-image-tokens)")


def add_image_options_arguments(p) -> None:
    """``--detail`` / ``--min-pixels`` / ``--max-pixels`` / ``--max-tokens``: what the request
    asks of every image (``ImageOptions``; what each family honours: docs/REQUESTS.md)."""
    g = p.add_argument_group("image options, for every image (docs/REQUESTS.md: what each family honours)")
    g.add_argument("--detail", choices=("auto", "low", "high"),
                   help="OpenAI's detail: low is a small budget where the family has one (Qwen-VL: 64 tokens; "
                   "Inkling: no upscale); auto and high are the model's")
    g.add_argument("--min-pixels", type=positive_int, metavar="N", help="Qwen-VL: smart_resize's min_pixels")
    g.add_argument("--max-pixels", type=positive_int, metavar="N", help="Qwen-VL: smart_resize's max_pixels")
    g.add_argument("--max-tokens", type=positive_int, metavar="N",
                   help="Qwen-VL: the most tokens an image may expand into (max_pixels = N x (patch x merge)^2)")


def add_video_arguments(p) -> None:
    """``--video SOURCE`` (repeatable) and the video options, for preprocess and plan."""
    g = p.add_argument_group("videos (docs/VIDEO.md): one video placeholder per video in --input-ids")
    g.add_argument("--video", dest="videos", action="append", default=[], metavar="SOURCE",
                   help="a video file (with --target also an http(s)://, data:, file:// URL); repeat for more")
    g.add_argument("--fps", type=float, metavar="F", help="frames sampled per second of video")
    g.add_argument("--num-frames", type=positive_int, metavar="N", help="exactly N frames, evenly spaced")
    g.add_argument("--min-frames", type=positive_int, metavar="N", help="at least N sampled frames")
    g.add_argument("--max-frames", type=positive_int, metavar="N", help="at most N sampled frames")
    g.add_argument("--video-min-pixels", type=positive_int, metavar="N", help="each frame's min_pixels")
    g.add_argument("--video-max-pixels", type=positive_int, metavar="N", help="each frame's max_pixels")
    g.add_argument("--video-max-tokens", type=positive_int, metavar="N",
                   help="the most tokens one video may expand into")


def add_audio_arguments(p) -> None:
    """``--audio SOURCE`` (repeatable) and the audio options, for preprocess and plan."""
    g = p.add_argument_group("audio (docs/AUDIO.md): one audio placeholder per clip in --input-ids")
    g.add_argument("--audio", dest="audios", action="append", default=[], metavar="SOURCE",
                   help="an audio file (with --target also an http(s)://, data:, file:// URL); repeat for more")
    g.add_argument("--audio-max-seconds", type=float, metavar="S", help="keep only each clip's first S seconds")


def audio_arguments(args, urls: bool = False) -> dict:
    """``preprocess``/``plan`` keyword arguments for ``--audio`` (none without clips):
    plain paths read here (bytes), URLs passed on when ``urls``."""
    from ..core.carriers import AudioOptions

    names = getattr(args, "audios", None) or ()
    if not names:
        return {}
    max_seconds = getattr(args, "audio_max_seconds", None)
    return {"audios": read_files(names, "audio", urls=urls),
            "audio_options": AudioOptions(max_seconds) if max_seconds is not None else None}


def print_audios(names, audios) -> None:
    """One line per clip of a response (AudioInfo) or an output (AudioResult)."""
    for i, (src, a) in enumerate(zip(names, audios)):
        offset = a.structural_range[0] if isinstance(a.structural_range, tuple) else a.structural_range.offset
        print(f"[audio {i}] {src if len(src) < 80 else src[:77] + '...'}: {a.sample_rate} Hz, {a.channels} channel(s), "
              f"{a.duration_s:.2f} s -> {a.samples} samples, {a.frames} frames, {a.token_count} tokens at {offset}, "
              f"blake3 {a.hash[:16]}")


def video_options_of(args):
    """The ``VideoOptions`` those arguments ask for, or None."""
    from ..core.carriers import VideoOptions

    options = VideoOptions(
        fps=getattr(args, "fps", None), num_frames=getattr(args, "num_frames", None),
        min_frames=getattr(args, "min_frames", None), max_frames=getattr(args, "max_frames", None),
        min_pixels=getattr(args, "video_min_pixels", None), max_pixels=getattr(args, "video_max_pixels", None),
        max_tokens=getattr(args, "video_max_tokens", None))
    return None if options == VideoOptions() else options


class UsageError(Exception):
    """Options that cannot go together, or a value no option takes: the command exits 2,
    as for argparse's own mistakes (README, "Exit codes")."""


class UnreadableFile(Exception):
    """A file named on the command line that cannot be read (the message names it)."""


def read_files(names, kind: str, urls: bool = False) -> list:
    """The files' bytes; with ``urls``, a URL stays a string for the server to fetch.
    UnreadableFile names the ``kind`` ("image", "video"), its index and the path."""
    out: list = []
    for i, name in enumerate(names):
        if urls and _URL.match(name):
            out.append(name)
            continue
        try:
            out.append(Path(name).read_bytes())
        except OSError as e:
            raise UnreadableFile(f"{kind} {i} ({name}): cannot read it: {e.strerror or e}") from None
    return out


def read_sources(args) -> tuple[list, list]:
    """``args``' images and videos: plain paths read here (bytes), URLs passed on."""
    return read_files(args.images, "image", urls=True), read_files(getattr(args, "videos", None) or (), "video", urls=True)


_ITEM = re.compile(r"\b(image|video) (\d+)\b")


def say_error(e, args) -> None:
    """A PreprocessError, in-process or the client's, as ``error: CODE: message`` with its
    items named by their files."""
    print(f"error: {e.code.value}: {name_items(e.message, args)}", file=sys.stderr)


def name_items(message: str, args) -> str:
    """An error's first "image N" / "video N" followed by the path or URL given for it."""
    def named(m: re.Match) -> str:
        given = args.images if m.group(1) == "image" else getattr(args, "videos", None) or ()
        i = int(m.group(2))
        if i >= len(given) or message.startswith(f": {given[i]}", m.end()):  # (a URL the server named already)
            return m.group(0)
        return f"{m.group(0)} ({given[i]})"

    return _ITEM.sub(named, message, count=1)


def image_options_of(args):
    """The ``ImageOptions`` those arguments ask for, or None."""
    from ..core.carriers import ImageOptions

    options = ImageOptions(min_pixels=getattr(args, "min_pixels", None), max_pixels=getattr(args, "max_pixels", None),
                           max_tokens=getattr(args, "max_tokens", None), detail=getattr(args, "detail", None))
    return None if options == ImageOptions() else options


def add_media_ids_argument(p) -> None:
    p.add_argument("--media-ids", action="store_true",
                   help="with --target: send image files by their blake3 hash, and their bytes only if the "
                   "server does not hold them already")


def options_text(options) -> str:
    """ImageInfo.options (or ImageResult.options) in words: "min_pixels 3136, max_pixels ..., detail low"."""
    if options is None:
        return ""
    if hasattr(options, "as_dict"):
        fields = options.as_dict()
    else:
        from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb

        fields = {f.name: v for f, v in options.ListFields()}
        if "detail" in fields:
            fields["detail"] = pb.Detail.Name(fields["detail"]).removeprefix("DETAIL_").lower()
    return ", ".join(f"{k} {v}" for k, v in fields.items())


def run_serve(args) -> int:
    from ..server.app import ServerConfig
    from ..server.launch import run

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        policy = media_policy(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.max_message_bytes:
        args.max_receive_bytes = args.max_send_bytes = args.max_message_bytes
    config = ServerConfig(models=list(args.models), fetch_policy=policy, tune_malloc=not args.malloc_defaults,
                          amx=not args.no_amx, **_given(
        processor=args.processor, client_media_ids=False if getattr(args, "no_client_media_ids", False) else None,
        shared_media_store=True if getattr(args, "shared_media_store", False) else None,
        **_fields(args, (*SERVER_OPTIONS, *REQUEST_OPTIONS, *VIDEO_OPTIONS, *AUDIO_OPTIONS, *SHM_OPTIONS,
                         *DEPLOY_OPTIONS)),
    ))
    problem = _deploy_problem(config) or _media_redis_from_env(config, args.media_store_redis_env) or (
        _media_redis_problem(config))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        from ..server.gate import load_tokens

        config.auth_tokens = load_tokens(args.auth_token_file, args.auth_token_env)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run(config)


def media_policy(args):
    """The FetchPolicy of ``add_media_policy_arguments``' flags (unset: its defaults)."""
    from ..media import FetchPolicy

    return FetchPolicy.from_env(**_given(
        allowed_local_media_path=args.allowed_local_media_path,
        allowed_media_domains=_domains(args.allowed_media_domains),
        allow_private_hosts=args.allow_private_hosts or None,
        allow_metadata_hosts=args.allow_metadata_hosts or None,
        **_fields(args, FETCH_OPTIONS),
    ))


def _media_redis_from_env(config, var: str | None) -> str:
    """``--media-store-redis-env VAR``: the URL read into ``config``; what is wrong, or ""."""
    if not var:
        return ""
    if config.media_store_redis:
        return "give --media-store-redis or --media-store-redis-env, not both"
    config.media_store_redis = os.environ.get(var, "").strip()
    return "" if config.media_store_redis else f"--media-store-redis-env: ${var} is not set or empty"


def _media_redis_problem(config) -> str:
    """What is wrong with the --media-store-redis options, or ""."""
    from ..service import media_remote

    if not config.media_store_redis:
        return ""
    if not config.media_store_redis.startswith(("redis://", "rediss://", "unix://")):
        return "--media-store-redis takes a redis://, rediss:// or unix:// URL"
    if config.media_store_bytes <= 0:
        return "--media-store-redis needs a media store (--media-store-bytes above 0): it is the store's second tier"
    if not config.media_store_redis_ttl_s > 0:
        return "--media-store-redis-ttl must be positive"
    if not config.media_store_redis_timeout_s > 0:
        return "--media-store-redis-timeout must be positive"
    try:
        media_remote.check_namespace(config.media_store_redis_namespace)
        media_remote.load_client()
    except (ValueError, RuntimeError) as e:
        return str(e)
    return ""


def _deploy_problem(config) -> str:
    """What is wrong with the TLS / replica options together, or ""."""
    from ..core.owners import check_replica_id

    if bool(config.tls_cert) != bool(config.tls_key):
        return "--tls-cert and --tls-key go together"
    if config.tls_client_ca and not config.tls_cert:
        return "--tls-client-ca (mTLS) needs --tls-cert and --tls-key"
    for path in (config.tls_cert, config.tls_key, config.tls_client_ca):
        if path and not Path(path).is_file():
            return f"no such file: {path}"
    if config.replica_id is not None:
        try:
            check_replica_id(config.replica_id)
        except ValueError as e:
            return str(e)
    if config.drain_delay_s < 0:
        return "--drain-delay must not be negative"
    return ""


def _fields(args, options) -> dict:
    """The values of ``options`` (rows of SERVER_OPTIONS, ...) by field name."""
    return {dest: getattr(args, dest) for _, _, _, dest, _ in options}


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


def run_remote_preprocess(args) -> int:
    """One call through a server. Plain paths are read here; URLs go as strings.

    Reads ``args``: target, model, images, backend (None: no payload), input_ids
    (comma-separated text or None), out, timeout and max_image_tokens (optional).
    """
    import numpy as np

    from ..client.client import Client, payload_arrays, payload_options

    try:
        sources, videos = read_sources(args)
    except UnreadableFile as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    ids = parse_ids(getattr(args, "input_ids", None))
    backend = getattr(args, "backend", None)
    try:
        security = client_security(args)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    media_ids = bool(getattr(args, "media_ids", False))
    with Client(args.target, timeout=getattr(args, "timeout", None) or 120.0, media_ids=media_ids,
                **security) as client:
        try:
            dtype = getattr(args, "pixel_dtype", None)
            resp = client.preprocess(args.model, sources, input_ids=ids, backend=backend,
                                     max_image_tokens=getattr(args, "max_image_tokens", None),
                                     options=payload_options(dtype) if dtype else None,
                                     image_options=image_options_of(args), videos=videos,
                                     video_options=video_options_of(args), **audio_arguments(args, urls=True))
            if resp.handle and not backend:
                client.release(resp.handle)  # nothing will assemble it
        except PreprocessError as e:  # the client's RemoteError
            say_error(e, args)
            return 1

    _print_images(args.images, resp.images)
    print_videos(getattr(args, "videos", None) or (), resp.videos)
    print_audios(getattr(args, "audios", None) or (), resp.audios)
    t = resp.timings
    print(
        f"{len(resp.input_ids)} input ids; fetch {t.fetch_ms:.1f} ms, decode {t.decode_ms:.1f} ms, "
        f"process {t.process_ms:.1f} ms, total {t.total_ms:.1f} ms (server side)"
    )
    arrays: dict[str, Any]  # np.savez's keywords: names to arrays
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


def _print_images(names, images) -> None:
    """One line per image of a PreprocessResponse or PlanResponse."""
    for i, (src, im) in enumerate(zip(names, images)):
        grid = f", grid {'x'.join(map(str, im.grid))}" if im.grid else ""
        options = options_text(im.options)
        print(
            f"[{i}] {src if len(src) < 80 else src[:77] + '...'}: HxW {im.height}x{im.width} -> "
            f"{im.resized_height}x{im.resized_width}{grid}, {im.token_count} tokens "
            f"at {im.structural_range.offset}, blake3 {im.hash[:16]}{', cached' if im.cached else ''}"
            f"{f' ({options})' if options else ''}"
        )


def print_videos(names, videos) -> None:
    """One line per video of a response (VideoInfo) or an output (VideoResult)."""
    for i, (src, v) in enumerate(zip(names, videos)):
        offset = v.structural_range[0] if isinstance(v.structural_range, tuple) else v.structural_range.offset
        frames = list(v.frame_indices)
        shown = ",".join(map(str, frames[:6])) + (",..." if len(frames) > 6 else "")
        print(f"[video {i}] {src if len(src) < 80 else src[:77] + '...'}: {v.total_frames} frames at {v.fps:g} fps "
              f"({v.duration_s:.2f} s), HxW {v.height}x{v.width} -> {v.resized_height}x{v.resized_width}, "
              f"grid {'x'.join(map(str, v.grid))}, {len(frames)} frames sampled [{shown}], {v.token_count} tokens "
              f"at {offset}, blake3 {v.hash[:16]}")


def run_remote_plan(args) -> int:
    """``plan --target``: what Preprocess would produce, from the servers' reading of the
    headers. Reads ``args`` as ``run_remote_preprocess`` does (no backend, no out)."""
    from ..client.client import Client

    try:
        sources, videos = read_sources(args)
    except UnreadableFile as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        security = client_security(args)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with Client(args.target, timeout=getattr(args, "timeout", None) or 120.0,
                media_ids=bool(getattr(args, "media_ids", False)), **security) as client:
        try:
            resp = client.plan(args.model, sources, input_ids=parse_ids(getattr(args, "input_ids", None)),
                               max_image_tokens=getattr(args, "max_image_tokens", None),
                               image_options=image_options_of(args), videos=videos,
                               video_options=video_options_of(args), **audio_arguments(args, urls=True))
        except PreprocessError as e:  # the client's RemoteError
            say_error(e, args)
            return 1
    _print_images(args.images, resp.images)
    print_videos(getattr(args, "videos", None) or (), resp.videos)
    print_audios(getattr(args, "audios", None) or (), resp.audios)
    print(f"{resp.input_ids_length} input ids; {sum(im.token_count for im in resp.images)} image tokens; "
          f"total {resp.timings.total_ms:.2f} ms (server side; nothing decoded)")
    return 0


def parse_ids(value):
    """``--input-ids`` text (``"1, 2,3"``) -> [1, 2, 3]; None and lists pass through."""
    if value is None or isinstance(value, (list, tuple)):
        return value
    try:
        return [int(t) for t in str(value).replace(" ", "").split(",") if t]
    except ValueError:
        raise UsageError(f"--input-ids must be comma-separated integers, got {value!r}") from None
