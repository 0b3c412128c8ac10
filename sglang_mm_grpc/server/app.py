"""The gRPC server: lifecycle around the servicer.

Start listening at once with health NOT_SERVING, load every model and warm its kernels
in the worker pool, warm the gRPC transport (``transport_warmup``), then report
SERVING. CPU work runs on a thread pool sized to the cores (the kernels release the
GIL). SIGTERM/SIGINT: health NOT_SERVING at once, keep serving for ``drain_delay_s``
(routers and Kubernetes see NOT_SERVING and move away), then refuse new RPCs with
UNAVAILABLE (``gate.py``), let in-flight ones finish within the grace period, exit 0
(during a first start's kernel compile: its helper processes are killed at once).
Counters are served by GetStats and, with ``metrics_port``, as Prometheus text over HTTP
on ``metrics_host`` (loopback unless asked), guarded as the gRPC port is (the same tokens,
TLS files and client CA). With TLS files the port speaks TLS (mTLS with a client CA); with
tokens every call but health needs ``authorization: Bearer <token>`` (``gate.py``). One
process of ``serve --processes N`` (``server/supervisor.py``) shares the port (SO_REUSEPORT),
binds it only once warm, and reaches its siblings over Unix sockets (``siblings.py``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..service.admission import default_max_in_flight
from ..service import request_bounds
from .allocator import IDLE_TRIM_S, trim, tune_for_large_tensors
from ..kernels import amx
from .. import config as model_config
from ..config import preset_names
from ..pipeline.cache import PreprocessCache
from ..pipeline.driver import DEFAULT_CACHE_BYTES, DEFAULT_MAX_IMAGE_TOKENS, DEFAULT_MAX_IMAGES, DEFAULT_MAX_INPUT_IDS, Preprocessor
from ..media.audio import AudioLimits
from ..media.video import VideoLimits
from ..pipeline.audio_driver import DEFAULT_MAX_AUDIO_TOKENS, DEFAULT_MAX_AUDIOS
from ..pipeline.video_driver import DEFAULT_MAX_VIDEO_TOKENS, DEFAULT_MAX_VIDEOS
from ..media import FetchPolicy, MediaFetcher, enable_in_place_decode
from ..media.decode import DEFAULT_MAX_PIXELS
from ..pipeline.metrics import Metrics
from ..service import calls
from ..core import owners
from .gate import Gate, caller_identity, server_credentials
from ..service.media_remote import DEFAULT_NAMESPACE, DEFAULT_TTL_S, TIMEOUT_S, RemoteMedia
from ..service.media_store import MediaStore
from ..service.servicer import SERVICE_NAME, PreprocessorServicer
from .siblings import Siblings
from .workers import WarmFirstExecutor
from ..wire.shm import DEFAULT_LEASE_S, DEFAULT_MODE, ShmArena, default_owner_id
from ..service.handles import HandleStore
from ..service.transport import Transport, default_min_bytes, default_transport
from ..kernels import wirecast
from .transport_warmup import warm_transport
from . import precompile
from ..wire.serialize import serialize_response

if TYPE_CHECKING:
    from .exporter import MetricsEndpoint

log = logging.getLogger(__name__)

HealthServicer = health.aio.HealthServicer
HEALTH_SERVICE_NAME = health.SERVICE_NAME

MiB = 1 << 20
#: Encoded images kept for media ids, by default.
DEFAULT_MEDIA_STORE_BYTES = 256 * MiB
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 50061
    # Preset ids, model directories or NAME=DIR; empty: every built-in preset.
    models: list[str] = field(default_factory=list)
    # "torchvision": models whose family offers it (Qwen-VL) reproduce the torchvision
    # processor instead of the PIL one; a model's own @PROCESSOR suffix wins.
    processor: str | None = None
    workers: int = 0  # 0: one per core
    max_receive_bytes: int = 512 * MiB
    max_send_bytes: int = 512 * MiB
    store_bytes: int = 2048 * MiB
    store_items: int = 4096
    handle_ttl_s: float = 120.0
    grace_s: float = 30.0
    # What image sources may be fetched (domains, local root, limits, timeouts).
    fetch_policy: FetchPolicy | None = None  # None: FetchPolicy.from_env()
    # Images in one request (checked before anything is fetched).
    max_images: int = DEFAULT_MAX_IMAGES
    # Largest width x height decoded (checked from the image header, before decoding).
    max_image_pixels: int = DEFAULT_MAX_PIXELS
    # Tokens one image may expand into, per model (a request may ask for fewer); checked
    # from the image header, before decoding.
    max_image_tokens: int = DEFAULT_MAX_IMAGE_TOKENS
    # Token ids per request, as sent and as expanded (checked from the length alone).
    max_input_ids: int = DEFAULT_MAX_INPUT_IDS
    # Videos in one request, and tokens one video may expand into (a request may ask for
    # fewer), for the models that take video (docs/VIDEO.md).
    max_videos: int = DEFAULT_MAX_VIDEOS
    max_video_tokens: int = DEFAULT_MAX_VIDEO_TOKENS
    # What one video may cost (media.video.VideoLimits): bytes (checked while fetching,
    # a streamed body cut off at the limit), duration, frames decoded and sampled, pixels
    # per frame (from the container header), and seconds of decoding.
    video_max_bytes: int = VideoLimits.max_bytes
    video_max_duration_s: float = VideoLimits.max_duration_s
    video_max_decoded_frames: int = VideoLimits.max_decoded_frames
    video_max_sampled_frames: int = VideoLimits.max_sampled_frames
    video_max_frame_pixels: int = VideoLimits.max_frame_pixels
    video_decode_timeout_s: float = VideoLimits.decode_timeout_s
    # Audio clips in one request, and tokens one clip may expand into, for the models that
    # take audio (docs/AUDIO.md); what one clip may cost (media.audio.AudioLimits): bytes,
    # duration, sample rate and channels (from the header), samples decoded, seconds of decoding.
    max_audios: int = DEFAULT_MAX_AUDIOS
    max_audio_tokens: int = DEFAULT_MAX_AUDIO_TOKENS
    audio_max_bytes: int = AudioLimits.max_bytes
    audio_max_duration_s: float = AudioLimits.max_duration_s
    audio_max_sample_rate: int = AudioLimits.max_sample_rate
    audio_max_channels: int = AudioLimits.max_channels
    audio_max_decoded_samples: int = AudioLimits.max_decoded_samples
    audio_decode_timeout_s: float = AudioLimits.decode_timeout_s
    # Preprocessed images kept for repeats, shared by all models (0 disables).
    cache_bytes: int = DEFAULT_CACHE_BYTES
    # Encoded images kept by blake3 for media ids (MediaItem.media_id; 0: none kept, every
    # media id is answered NOT_FOUND and the client sends the bytes).
    media_store_bytes: int = DEFAULT_MEDIA_STORE_BYTES
    # Client-chosen media ids (MediaItem.bind_id, and media_id other than a hash), bound per
    # caller identity; False: only hashes name images.
    client_media_ids: bool = True
    # Media ids by hash, and the preprocessing cache's hits (ImageInfo.cached), for every
    # caller rather than only for the caller that sent the bytes: one tenant, many routers.
    shared_media_store: bool = False
    # The media store's shared tier: a Redis URL (redis:// or rediss://) every replica with
    # the same namespace writes its media ids to and reads the ones it lacks from; each key
    # lives ttl seconds from its last write (docs/SERVICE.md). None: the local store alone.
    media_store_redis: str | None = field(default=None, repr=False)  # its password is no log's business
    media_store_redis_ttl_s: float = DEFAULT_TTL_S
    media_store_redis_namespace: str = DEFAULT_NAMESPACE
    # Seconds a lookup of the ids not held here may take (within the request's deadline).
    media_store_redis_timeout_s: float = TIMEOUT_S
    # Preprocess/Assemble calls in flight at once; past it RESOURCE_EXHAUSTED at once.
    # 0: admission.default_max_in_flight(workers).
    max_in_flight: int = 0
    # Prometheus text over HTTP on metrics_host:metrics_port (0: off). Its own address,
    # loopback whatever host is: the counters name models and reveal traffic. With tokens
    # a scrape needs one; with TLS it is HTTPS with the same certificate (and client CA).
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    # glibc malloc keeps freed tensors for the next request (see allocator.py).
    tune_malloc: bool = True
    # Ask Linux for AMX tiles, which the resize kernels use where the CPU has them (see kernels/amx.py).
    amx: bool = True
    # How payload tensors travel to vLLM / TokenSpeed workers when a request does not say:
    # inline | shm | auto (None: $SMG_MM_TENSOR_TRANSPORT, else inline).
    tensor_transport: str | None = None
    # Tensors smaller than this stay inline (None: $SMG_MM_SHM_MIN_BYTES, else 64 KiB).
    shm_min_bytes: int | None = None
    # The most bytes kept in /dev/shm at once (None: a quarter of it, at most 2 GiB; 0: no SHM).
    shm_budget_bytes: int | None = None
    # Seconds a handed-out segment may stay unread before the server removes it.
    shm_lease_s: float = DEFAULT_LEASE_S
    # File mode of the segments (0600: only this user's workers can read them).
    shm_mode: int = DEFAULT_MODE
    # Names this instance's segments (None: <host>-<port>); a restart with the same id
    # removes what the previous instance left.
    shm_owner_id: str | None = None
    # Processes sharing the port (serve --processes; server/supervisor.py). This process's index
    # among them, and the private directory of their Unix sockets (set by the supervisor).
    processes: int = 1
    process_index: int = 0
    sibling_dir: str | None = None
    # Names this replica inside every handle (None: <host>-<port>, see owners.py).
    replica_id: str | None = None
    # Seconds the port keeps serving after SIGTERM while health says NOT_SERVING.
    drain_delay_s: float = 0.0
    # TLS: certificate chain and key (PEM files); with a client CA, clients must present
    # a certificate it signed (mTLS).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    # Accepted bearer tokens (gate.load_tokens); None: no authentication.
    auth_tokens: list | None = field(default=None, repr=False)


class Server:
    """One server instance. ``start`` binds and begins loading; ``stop`` drains."""

    def __init__(self, config: ServerConfig):
        self.config = config
        enable_in_place_decode()  # the server owns its process: decoded pixels are read in place
        if config.amx:
            amx.request()  # the resize kernels' tile multiplies, where the CPU has them
        self.workers = config.workers or default_threads()
        self.executor = WarmFirstExecutor(self.workers, thread_name_prefix="mm-worker")
        self.store: HandleStore = HandleStore(config.store_bytes, config.store_items, config.handle_ttl_s,
                                              on_drop=self._dropped)
        self.transport = Transport(None, transport=default_transport(config.tensor_transport),
                                   min_bytes=default_min_bytes(config.shm_min_bytes),
                                   max_send_bytes=config.max_send_bytes)
        self.fetcher: MediaFetcher | None = None
        self.servicer: PreprocessorServicer | None = None
        self.health = HealthServicer()
        self.port: int | None = None
        self.preprocessors: dict[str, Preprocessor] = {}
        self.cache = PreprocessCache(config.cache_bytes) if config.cache_bytes > 0 else None
        self.media = MediaStore(config.media_store_bytes, client_ids=config.client_media_ids,
                                shared=config.shared_media_store)
        self.media_remote = (
            RemoteMedia(config.media_store_redis, max_item_bytes=config.media_store_bytes,
                        shared=config.shared_media_store, namespace=config.media_store_redis_namespace,
                        ttl_s=config.media_store_redis_ttl_s, timeout_s=config.media_store_redis_timeout_s)
            if config.media_store_redis else None
        )
        self.metrics = Metrics()
        self.max_in_flight = config.max_in_flight or default_max_in_flight(self.workers)
        self.metrics_endpoint: MetricsEndpoint | None = None  # when metrics_port is set
        self._server: grpc.aio.Server | None = None
        self._sweeper: asyncio.Task | None = None
        self._reaper: asyncio.Task | None = None
        self._trimmer: asyncio.Task | None = None
        self.trims = 0  # times freed heap was given back (idle after calls)
        self.gate = Gate(tokens=config.auth_tokens)
        self.siblings = (
            Siblings(config.process_index, config.processes, config.sibling_dir, config.max_send_bytes)
            if config.processes > 1 and config.sibling_dir else None
        )
        # A process of serve --processes binds only once warm (load(); before_listen).
        self.before_listen = None
        self._deferred = config.processes > 1
        self._cancel_compile = threading.Event()  # set: a first start's kernel compile stops

    async def start(self) -> int | None:
        """Bind and start answering (NOT_SERVING until ``load`` finishes); returns the port
        (a process of ``serve --processes`` binds at the end of ``load`` instead: None)."""
        cfg = self.config
        calls.install_log_filter()
        # The fetcher's connection pool and concurrency cap belong to this event loop.
        self.fetcher = MediaFetcher(cfg.fetch_policy)
        self.servicer = PreprocessorServicer(
            self.store,
            self.executor,
            self.fetcher.fetch_all,
            max_in_flight=self.max_in_flight,
            metrics=self.metrics,
            stats_parts=self._stats_parts,
            transport=self.transport,
            forward=self.siblings.forward if self.siblings else None,
            merge_stats=self.siblings.stats if self.siblings else None,
            media=self.media,
            caller=functools.partial(caller_identity, tokens=bool(cfg.auth_tokens)),
            media_remote=self.media_remote,
        )
        server = grpc.aio.server(
            interceptors=[self.gate],
            options=[
                ("grpc.max_receive_message_length", cfg.max_receive_bytes),
                ("grpc.max_send_message_length", cfg.max_send_bytes),
                # A taken port is an error, not a shared one; the processes of one
                # serve --processes share theirs (the supervisor has checked it was free).
                ("grpc.so_reuseport", 1 if cfg.processes > 1 else 0),
            ],
        )
        _add_servicer(self.servicer, server, cfg.max_input_ids)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            [SERVICE_NAME, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME], server
        )
        for name in ("", SERVICE_NAME):
            await self.health.set(name, NOT_SERVING)
        self._credentials = (
            server_credentials(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca) if cfg.tls_cert or cfg.tls_key else None
        )
        self._server = server
        if not self._deferred:
            await self._listen()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        self._trimmer = asyncio.get_running_loop().create_task(self._trim_when_idle())
        if cfg.metrics_port:
            self._start_metrics()
        log.info(
            "%s %s:%s%s (%d workers, at most %d requests in flight); loading models",
            "will listen on" if self._deferred else "listening on", cfg.host,
            cfg.port if self.port is None else self.port, " with TLS" if self._credentials else "",
            self.workers, self.max_in_flight,
        )
        return self.port

    def _start_metrics(self) -> None:
        """Prometheus text on metrics_host (not host), guarded as the gRPC port is: the same
        tokens, and HTTPS with its certificate, key and client CA."""
        from .exporter import MetricsEndpoint

        cfg = self.config
        metrics_port = cfg.metrics_port + cfg.process_index  # one per process of serve --processes
        assert self.servicer is not None  # made by start()
        try:
            self.metrics_endpoint = MetricsEndpoint(
                cfg.metrics_host, metrics_port, self.servicer.snapshot, tokens=cfg.auth_tokens,
                tls_cert=cfg.tls_cert, tls_key=cfg.tls_key, tls_client_ca=cfg.tls_client_ca,
            )
        except (OSError, ValueError) as e:
            raise OSError(f"cannot serve metrics on {cfg.metrics_host}:{metrics_port}: {e}") from None
        log.info("metrics on %s://%s:%d/metrics%s", "https" if self.metrics_endpoint.tls else "http",
                 cfg.metrics_host, self.metrics_endpoint.port,
                 " (bearer token required)" if cfg.auth_tokens is not None else "")

    async def _listen(self) -> None:
        """Bind the port (and a sibling's Unix socket), start answering, name the owner."""
        cfg, server = self.config, self._server
        assert server is not None and self.servicer is not None  # made by start()
        address = f"{cfg.host}:{cfg.port}"
        try:
            if self._credentials is not None:
                port = server.add_secure_port(address, self._credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError:  # grpc raises this when the bind fails
            port = 0
        if port == 0:
            raise OSError(bind_failure(cfg.host, cfg.port))
        if self.siblings is not None:
            server.add_insecure_port(self.siblings.own_address)
        await server.start()
        self.port = port
        owner = owners.Owner(owners.check_replica_id(cfg.replica_id or owners.default_replica_id(port)),
                             cfg.process_index)
        self.store.set_owner(str(owner))
        self.servicer.set_owner(owner)
        self.gate.owner_metadata = ((owners.METADATA_KEY, str(owner)),)
        self._open_shm(port)

    def _open_shm(self, port: int) -> None:
        """The shared-memory segments, once the port (part of the default owner id) is
        bound: a restart removes what the previous instance with this id left."""
        cfg = self.config
        if cfg.shm_budget_bytes == 0:
            return
        try:
            arena = ShmArena(cfg.shm_owner_id or default_owner_id(port), budget_bytes=cfg.shm_budget_bytes,
                             lease_s=cfg.shm_lease_s, mode=cfg.shm_mode)
            arena.remove_previous()
        except ValueError as e:
            log.warning("no shared-memory transport: %s", e)
            return
        if not arena.writable():
            return
        self.transport.arena = arena
        period = max(0.05, min(1.0, cfg.shm_lease_s / 4))
        self._reaper = asyncio.get_running_loop().create_task(self._reap(period))
        log.info("shared memory: owner %s, namespace %s, budget %d bytes, lease %gs, default transport %s",
                 arena.owner_id, arena.namespace_id, arena.budget, arena.lease_s, self.transport.transport)

    def _dropped(self, kept, why: str) -> None:
        """A kept result expired or was evicted: its unused staged segments go (what it
        handed out lives until read or its lease ends)."""
        self.transport.drop(kept.all_segments(), why)

    async def _reap(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                self.transport.reap()
            except Exception:  # keep reaping; a broken segment must not stop the rest
                log.exception("reaping shared-memory segments")

    def _stats_parts(self) -> dict:
        return {
            "fetch": self.fetcher.stats if self.fetcher is not None else {},
            "cache": self.cache.stats if self.cache is not None else None,
            "store": self.store.stats(),
        }

    async def load(self) -> None:
        """Load and warm every model off the event loop, then report SERVING. A first start
        (a model whose kernels this cache has not all held yet: ``precompile.warm_marker``)
        compiles in helper processes and serves each model as soon as its kernels are
        ready (``serve_while_compiling``)."""
        specs = self.config.models or preset_names()
        models = {spec: model_config.load(spec, processor=self.config.processor) for spec in specs}
        twice = [name for name, n in Counter(m.name for m in models.values()).items() if n > 1]
        if twice:
            raise ValueError(f"two models are served as {twice[0]!r}; name one of them with NAME=DIR")
        first_start = not all(precompile.warm_marker(m.family.fingerprint()).exists() for m in models.values())
        if first_start and not self._deferred:
            await self.serve_while_compiling({spec: m.name for spec, m in models.items()})
            return
        if first_start:
            processes = precompile.default_processes()
            log.info("compiling kernels (first start only: a few minutes for every preset, in %d process(es); later "
                     "starts load them from the cache in seconds)", processes)
            await asyncio.get_running_loop().run_in_executor(None, functools.partial(
                precompile.compile_kernels, specs, self.config.processor, processes, cancel=self._cancel_compile))
        for i, spec in enumerate(specs, start=1):
            log.info("loading %s (%d of %d)", spec, i, len(specs))
            await self._add(spec)
        await self._serving()

    def cancel_load(self, loading: asyncio.Task) -> None:
        """Stop ``load`` (its task): the kernel compile's helpers are killed at once."""
        self._cancel_compile.set()
        loading.cancel()

    async def serve_while_compiling(self, names: dict[str, str]) -> None:
        """SERVING as soon as the first model's kernels are compiled and loaded, each other
        model joining as its own are (its health service, its name, says SERVING then; until
        then a call for it is UNAVAILABLE saying it loads). No request compiles anything.
        ``names``: the served name of each model spec."""
        loop = asyncio.get_running_loop()
        specs = list(names)
        for name in names.values():
            await self.health.set(name, NOT_SERVING)
        processes = precompile.default_processes()
        log.info("compiling kernels (first start only, in %d process(es)): serving each model as soon as its kernels "
                 "are ready; later starts load them from the cache in seconds", processes)
        ready: asyncio.Queue[str | None] = asyncio.Queue()
        servicer = self.servicer
        assert servicer is not None  # made by start()

        def on_ready(spec: str) -> None:  # from the compile's thread
            loop.call_soon_threadsafe(ready.put_nowait, spec)

        compiling = loop.run_in_executor(None, functools.partial(
            precompile.compile_kernels, specs, self.config.processor, processes, on_ready=on_ready,
            cancel=self._cancel_compile))
        compiling.add_done_callback(lambda _: ready.put_nowait(None))
        waiting = list(specs)
        while waiting:
            spec = await ready.get()
            # None: the compile is over, yet models wait (a helper failed): load them, compiling what is missing
            for spec in list(waiting) if spec is None else [spec] if spec in waiting else []:
                waiting.remove(spec)
                await self._add(spec)
                loading = [names[s] for s in waiting]
                if len(self.preprocessors) == 1:
                    await self._serving(loading)
                    continue
                servicer.set_models(self.preprocessors, loading)
                await self.health.set(names[spec], SERVING)
                log.info("SERVING %s too (%d of %d models; %d loading)", names[spec], len(self.preprocessors),
                         len(specs), len(waiting))
        await compiling

    async def _add(self, spec: str) -> None:
        """Load ``spec`` (its kernels from the cache) into ``preprocessors``."""
        pp = await asyncio.get_running_loop().run_in_executor(self.executor, self._load_one, spec)
        self.preprocessors[pp.name] = pp

    async def _serving(self, loading: list[str] | tuple = ()) -> None:
        """Serve the models loaded so far (``loading``: the names of those to come): warm
        what the first response needs, bind (a process of ``serve --processes``), say
        SERVING."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, wirecast.warmup)  # the serializer's dtype conversion
        assert self.servicer is not None  # made by start()
        self.servicer.set_models(self.preprocessors, loading)
        if self.config.tune_malloc:  # the warmed-up heap is kept only by the tuned malloc
            try:
                await warm_transport()
            except Exception as e:  # only the first large response is slower without it
                log.warning("gRPC transport warm-up skipped: %s", e)
        if self._deferred:  # warm now: join the shared port when the supervisor says so
            if self.before_listen is not None:
                await self.before_listen()
            await self._listen()
        for name in ("", SERVICE_NAME, *self.preprocessors):
            await self.health.set(name, SERVING)
        log.info("SERVING on %s:%d: %s%s", self.config.host, self.port, ", ".join(self.preprocessors),
                 f" ({len(loading)} more loading)" if loading else "")

    def _load_one(self, spec: str) -> Preprocessor:
        pp = Preprocessor.from_model(
            spec,
            processor=self.config.processor,
            executor=self.executor,
            max_images=self.config.max_images,
            max_image_pixels=self.config.max_image_pixels,
            max_image_tokens=self.config.max_image_tokens,
            max_input_ids=self.config.max_input_ids,
            max_videos=self.config.max_videos,
            max_video_tokens=self.config.max_video_tokens,
            video_limits=video_limits(self.config),
            max_audios=self.config.max_audios,
            max_audio_tokens=self.config.max_audio_tokens,
            audio_limits=audio_limits(self.config),
            cache_bytes=0,
            cache=self.cache,
        )
        pp.warmup()
        precompile.mark_warm(pp.spec_key)
        log.info("loaded %s (%s, %s)", pp.name, pp.info["family"], pp.info["reference_processor"])
        for note in pp.notes:
            log.warning("%s: %s", pp.name, note)
        return pp

    async def stop(self, grace: float | None = None, drain_delay: float = 0.0) -> None:
        """NOT_SERVING at once; keep serving for ``drain_delay`` seconds; then answer new
        RPCs UNAVAILABLE and give the ones in flight ``grace`` seconds to finish."""
        await self.health.enter_graceful_shutdown()
        grace = self.config.grace_s if grace is None else grace
        if drain_delay > 0 and self.port is not None:
            log.info("NOT_SERVING; still answering for %.1fs (--drain-delay)", drain_delay)
            await asyncio.sleep(drain_delay)
        self.gate.closing = True  # from here new calls get UNAVAILABLE, never a closed port
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._trimmer is not None:
            self._trimmer.cancel()
        if self._reaper is not None:
            self._reaper.cancel()
        if self._server is not None:
            end = time.monotonic() + grace
            while self.gate.active > 0 and time.monotonic() < end:  # in flight: running or sending
                await asyncio.sleep(0.02)
            await self._server.stop(max(0.0, end - time.monotonic()))
        if self.servicer is not None:
            # Past the grace period: work still running stops at its next image.
            self.servicer.cancel_all()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        # Waited for off the loop, so the cut-off calls' handlers can finish meanwhile.
        await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self.executor.shutdown, wait=True, cancel_futures=True)
        )
        if self.fetcher is not None:
            await self.fetcher.aclose()
        if self.siblings is not None:
            await self.siblings.close()
        if self.media_remote is not None:
            await self.media_remote.aclose()
        if self.transport.arena is not None:
            self.transport.arena.close()  # every segment still here goes, read or not

    async def _trim_when_idle(self) -> None:
        """Give the freed heap back once no call has been in flight for ``IDLE_TRIM_S`` after
        some were: the tuned malloc keeps freed tensors for reuse while calls come (fast
        repeats), and would otherwise hold a burst's high-water mark for good."""
        loop = asyncio.get_running_loop()
        idle_since, dirty = loop.time(), False
        while True:
            await asyncio.sleep(IDLE_TRIM_S / 4)
            if self.servicer is None:
                continue
            if self.servicer.admission.in_flight or self.servicer.busy:
                idle_since, dirty = loop.time(), True
            elif dirty and loop.time() - idle_since >= IDLE_TRIM_S:
                dirty = False
                await loop.run_in_executor(None, trim)  # tens of ms for GBs, off the event loop
                self.trims += 1

    async def _sweep(self) -> None:
        period = max(1.0, min(30.0, self.config.handle_ttl_s / 2))
        while True:
            await asyncio.sleep(period)
            self.store.sweep()


async def serve(config: ServerConfig, *, before_listen=None, signals=(signal.SIGTERM, signal.SIGINT)) -> int:
    """Run until SIGTERM or SIGINT; returns the process exit code. ``before_listen``: what
    a process of ``serve --processes`` awaits, warm, before it joins the shared port."""
    server = Server(config)
    server.before_listen = before_listen
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except Exception as e:
        log.error("%s", e)
        await server.stop(0)
        return 1
    loading = loop.create_task(server.load())
    stopping = loop.create_task(stop.wait())
    await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not loading.done():  # a signal while loading: a compile stops now, a model's load finishes first
        server.cancel_load(loading)
        await asyncio.wait({loading})
    error = None if loading.cancelled() else loading.exception()
    if error is not None:
        log.error("cannot load models: %s", getattr(error, "message", error))
        code = 1
    else:
        await stopping
        log.info("signal received: draining (NOT_SERVING; answering for %gs, then up to %gs for calls in flight)",
                 config.drain_delay_s, config.grace_s)
        code = 0
    stopping.cancel()
    await server.stop(drain_delay=config.drain_delay_s if code == 0 else 0.0)
    log.info("stopped")
    return code


def bind_failure(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound, in words that say what to do (grpc only says it failed)."""
    import errno
    import socket

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, port))
    except socket.gaierror as e:
        return f"cannot listen on {host}:{port}: unknown host ({e.strerror}); pass --host with an address of this machine"
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return f"{host}:{port} is in use; stop the other server or pass --port (0 picks a free port)"
        if e.errno == errno.EADDRNOTAVAIL:
            return f"cannot listen on {host}:{port}: not an address of this machine; pass --host"
        if e.errno == errno.EACCES:
            return f"cannot listen on {host}:{port}: permission denied (ports below 1024 need privileges); pass --port"
        return f"cannot listen on {host}:{port}: {e.strerror}"
    return f"cannot listen on {host}:{port}"


def default_threads() -> int:
    """One worker per core this process may run on."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def _add_servicer(servicer: PreprocessorServicer, server, max_input_ids: int) -> None:
    """Register the service as the generated code does, except that a handler may return
    bytes it serialized itself (large payloads, see ``wire``), and that a PreprocessRequest's
    token ids are counted before they are parsed (``request_bounds``)."""
    handlers = {}
    bounded = request_bounds.deserializer(max_input_ids)
    for method in pb.DESCRIPTOR.services_by_name["MultimodalPreprocessor"].methods:
        request_class = getattr(pb, method.input_type.name)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=bounded if request_class is pb.PreprocessRequest else request_class.FromString,
            response_serializer=serialize_response,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def audio_limits(config: ServerConfig) -> AudioLimits:
    """The ``AudioLimits`` of ``config``'s audio_* fields."""
    return AudioLimits(
        max_bytes=config.audio_max_bytes, max_duration_s=config.audio_max_duration_s,
        max_sample_rate=config.audio_max_sample_rate, max_channels=config.audio_max_channels,
        max_decoded_samples=config.audio_max_decoded_samples, decode_timeout_s=config.audio_decode_timeout_s,
    )


def video_limits(config: ServerConfig) -> VideoLimits:
    """The ``VideoLimits`` of ``config``'s video_* fields."""
    return VideoLimits(
        max_bytes=config.video_max_bytes, max_duration_s=config.video_max_duration_s,
        max_decoded_frames=config.video_max_decoded_frames, max_sampled_frames=config.video_max_sampled_frames,
        max_frame_pixels=config.video_max_frame_pixels, decode_timeout_s=config.video_decode_timeout_s,
    )
