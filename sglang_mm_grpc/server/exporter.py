"""Prometheus text for a metrics Snapshot, served over HTTP (``serve --metrics-port``).

The collector takes one snapshot per scrape, on the HTTP server's own thread, so
requests never touch prometheus_client. Latencies are exported in seconds, as
Prometheus expects.

The endpoint is guarded as the gRPC port is: with bearer tokens, a scrape must send
``Authorization: Bearer <token>`` (compared with every token, ``gate.token_accepted``;
401 otherwise, before anything is rendered); with TLS it speaks TLS with the same
certificate and key (and requires a client certificate from the client CA under mTLS).
Each connection's handshake and request run on their own thread with a timeout, so a
client that stalls holds up no one else.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from typing import Callable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import CollectorRegistry

from .gate import bearer_token, token_accepted
from ..pipeline.metrics import BUCKETS_MS, Snapshot

log = logging.getLogger(__name__)

#: Seconds a scrape connection may take for its TLS handshake and for each read or write.
CONNECTION_TIMEOUT_S = 10.0

PREFIX = "sglang_mm_"


class SnapshotCollector:
    def __init__(self, snapshot: Callable[[], Snapshot]):
        self._snapshot = snapshot

    def collect(self):
        s = self._snapshot()
        yield _gauge("uptime_seconds", "Seconds since the server started.", s.uptime_s)
        yield _gauge("in_flight", "Requests holding a handler or a worker now.", s.in_flight)
        yield _gauge("max_in_flight", "In-flight limit; past it requests get RESOURCE_EXHAUSTED.", s.max_in_flight)
        yield _counter("rejected_busy", "Requests refused because the in-flight limit was reached.", s.rejected_busy)

        req = CounterMetricFamily(PREFIX + "requests", "RPCs started, by method.", labels=["method"])
        for method, n in sorted(s.requests.items()):
            req.add_metric([method], n)
        yield req
        resp = CounterMetricFamily(PREFIX + "responses", "RPCs finished, by method and status code.", labels=["method", "code"])
        for (method, code), n in sorted(s.statuses.items()):
            resp.add_metric([method, code], n)
        yield resp
        yield _counter("images", "Images in successful Preprocess calls.", s.images)
        yield _counter("image_bytes", "Encoded bytes of those images.", s.image_bytes)

        yield from _fetch_metrics(s.fetch or {})
        yield from _cache_and_store_metrics(s)
        yield _gauge("worker_busy", "Worker pool tasks running or queued now.", s.work_busy)
        steps = CounterMetricFamily(PREFIX + "image_steps", "Per-image decode/process steps, by outcome.", labels=["outcome"])
        steps.add_metric(["run"], s.image_steps)
        steps.add_metric(["skipped_cancelled"], s.image_steps_skipped)
        yield steps

        yield _stage_histogram(s)
        yield from _video_metrics(s.video)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, value=value)


class MetricsEndpoint:
    """``GET /metrics`` (any path) on ``host:port``; ``close`` stops it. ``tokens``: the
    bearer tokens a scrape must send one of (None: none needed); ``tls_cert`` / ``tls_key``:
    serve HTTPS, and with ``tls_client_ca`` require a client certificate it signed."""

    def __init__(self, host: str, port: int, snapshot: Callable[[], Snapshot], *, tokens=None,
                 tls_cert: str | None = None, tls_key: str | None = None, tls_client_ca: str | None = None):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(snapshot))
        app = make_wsgi_app(self.registry)
        if tokens is not None:
            app = _require_token(app, list(tokens))
        context = _tls_context(tls_cert, tls_key, tls_client_ca) if tls_cert or tls_key else None
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, address = infos[0][0], str(infos[0][4][0])  # an AF_INET(6) address: (host, port, ...)

        class _Server(_QuietServer):
            address_family = family

        self._httpd = make_server(address, port, app, _Server, handler_class=_Handler)
        if context is not None:  # the handshake runs on the connection's thread (_Handler.setup)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True,
                                                     do_handshake_on_connect=False)
        self.tls = context is not None
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="mm-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


class _QuietServer(ThreadingWSGIServer):
    def handle_error(self, request, client_address):  # a failed handshake, a client gone: no traceback
        log.debug("metrics connection from %s failed", client_address, exc_info=True)


class _Handler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S

    def setup(self):
        self.request.settimeout(self.timeout)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        """Log nothing per scrape."""


def _require_token(app, tokens: list[bytes]):
    """``app`` behind ``Authorization: Bearer <token>``: 401 (nothing rendered) without one
    of ``tokens``."""

    def guarded(environ, start_response):
        if not token_accepted(bearer_token(environ.get("HTTP_AUTHORIZATION", "")), tokens):
            start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                ("WWW-Authenticate", 'Bearer realm="metrics"')])
            return [b"missing or invalid bearer token: send 'Authorization: Bearer <token>'\n"]
        return app(environ, start_response)

    return guarded


def _tls_context(cert: str | None, key: str | None, client_ca: str | None) -> ssl.SSLContext:
    """The gRPC port's TLS for HTTPS: its certificate chain and key; with ``client_ca``,
    a client certificate it signed is required (mTLS). ValueError without the chain."""
    if not cert:
        raise ValueError("TLS needs a certificate chain (--tls-cert), not only a key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=cert, keyfile=key)
    if client_ca:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _fetch_metrics(f: dict):
    yield _counter("fetches", "Fetches started (http(s) and local files).", f.get("fetches_started", 0))
    yield _counter("fetch_failures", "Fetches that failed.", f.get("fetches_failed", 0))
    yield _counter("fetch_bytes", "Bytes fetched (http(s) and local files).", f.get("bytes_fetched", 0))
    yield _gauge("fetches_in_flight", "Fetches in flight now.", f.get("in_flight", 0))
    refusals = CounterMetricFamily(PREFIX + "fetch_refusals", "Sources refused by the fetch policy, by reason.", labels=["reason"])
    for reason, n in sorted(f.get("refusals", {}).items()):
        refusals.add_metric([reason], n)
    yield refusals


def _cache_and_store_metrics(s):
    if s.cache is not None:
        c = s.cache
        yield _counter("cache_hits", "Preprocessing cache hits.", c.hits)
        yield _counter("cache_misses", "Preprocessing cache misses.", c.misses)
        yield _counter("cache_evictions", "Preprocessing cache evictions.", c.evictions)
        yield _gauge("cache_items", "Images in the preprocessing cache.", c.items)
        yield _gauge("cache_bytes", "Bytes in the preprocessing cache.", c.bytes)
        yield _gauge("cache_max_bytes", "Preprocessing cache capacity.", c.max_bytes)
        yield _gauge("cache_peak_bytes", "The most the preprocessing cache ever held.", c.peak_bytes)
    if s.store is not None:
        st = s.store
        yield _gauge("store_items", "Handles kept now.", st.items)
        yield _gauge("store_bytes", "Bytes kept under handles now.", st.bytes)
        yield _gauge("store_max_bytes", "Handle store capacity in bytes.", st.max_bytes)
        yield _gauge("store_max_items", "Handle store capacity in handles.", st.max_items)
        yield _gauge("store_peak_bytes", "The most the handle store ever held.", st.peak_bytes)
        yield _counter("store_evictions", "Handles evicted to make room.", st.evicted)
        yield _counter("store_expired", "Handles that expired unused.", st.expired)
    if s.media is not None:
        m = s.media
        yield _gauge("media_items", "Encoded images kept for media ids.", m.items)
        yield _gauge("media_bytes", "Bytes of encoded images kept for media ids.", m.bytes)
        yield _gauge("media_max_bytes", "Media store capacity (0: media ids off).", m.max_bytes)
        yield _gauge("media_peak_bytes", "The most the media store ever held.", m.peak_bytes)
        yield _gauge("media_bound_ids", "Client media ids bound now.", m.bound_ids)
        yield _counter("media_hits", "Media ids found in the media store.", m.hits)
        yield _counter("media_misses", "Media ids not held (answered NOT_FOUND).", m.misses)
        yield _counter("media_stored", "Encoded images added to the media store.", m.stored)
        yield _counter("media_evictions", "Encoded images evicted from the media store.", m.evictions)
        yield _counter("media_remote_hits", "Media ids not held here, found in the shared Redis tier.",
                       m.remote_hits)
        yield _counter("media_remote_misses", "Media ids not held here nor in the shared Redis tier.", m.remote_misses)
        yield _counter("media_remote_errors", "Shared-tier lookups or writes that failed or were skipped.",
                       m.remote_errors)
        yield _counter("media_remote_invalid", "Bytes in the shared tier that were not their hash's (ignored).",
                       m.remote_invalid)
        yield _counter("media_remote_written", "Writes made to the shared tier.", m.remote_written)
        yield _counter("media_remote_dropped", "Writes to the shared tier dropped (queue full or Redis down).",
                       m.remote_dropped)


def _video_metrics(v):
    yield _counter("videos", "Videos in successful Preprocess calls.", v.videos)
    yield _counter("video_bytes", "Encoded bytes of those videos.", v.video_bytes)
    yield _counter("video_frames", "Frames sampled from those videos and decoded into pixels.", v.frames)
    yield _counter("videos_cached", "Of those, videos answered from the preprocessing cache (nothing decoded).",
                   v.cached)
    yield _counter("videos_planned", "Videos in successful Plan calls (nothing decoded).", v.planned)
    refusals = CounterMetricFamily(PREFIX + "video_refusals", "Calls that failed because of a video, by cause.",
                                   labels=["cause"])
    for cause, n in sorted(v.refusals.items()):
        refusals.add_metric([cause], n)
    yield refusals
    yield _histogram("video_stage_seconds", "Video decode and processing time per successful Preprocess with "
                     "videos (summed over its videos).", v.stages)


def _stage_histogram(s) -> HistogramMetricFamily:
    return _histogram("stage_seconds", "Latency of each stage of successful calls.", s.stages)


def _histogram(name: str, doc: str, stages: dict) -> HistogramMetricFamily:
    hist = HistogramMetricFamily(PREFIX + name, doc, labels=["stage"])
    for stage, h in stages.items():
        cumulative, buckets = 0, []
        for bound, n in zip((*BUCKETS_MS, float("inf")), h.counts):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound / 1e3), cumulative))
        hist.add_metric([stage], buckets, sum_value=h.sum_ms / 1e3)
    return hist
