"""The servers a ``Client`` talks to: one or several targets, each a channel with health.

* **Targets**: ``"host:port"``, ``"a:1,b:2"``, a list of them, or (``resolve=True``) a
  DNS name whose every address becomes a target (a headless Kubernetes Service), looked
  up again every ``resolve_interval`` seconds so new pods join and gone ones leave.
* **Health**: with several targets a daemon thread asks each one's health service every
  ``health_interval`` seconds; calls that balance (``any``) go round-robin over those
  answering SERVING (over all of them when none does). A call that fails before reaching
  the service (UNAVAILABLE without the server's owner tag: connection refused, reset, or
  a draining server's refusal) marks its target down and is sent to the next one.
* **Owners**: every answer names the replica that gave it (trailing metadata
  ``sglang-mm-owner``, ``owners.py``); ``owner(handle)`` sends a call to the target
  whose replica owns the handle.
* **Security**: TLS (``tls``; ``tls_ca`` to trust a private CA, ``tls_cert``/``tls_key``
  for mTLS, ``tls_server_name`` when the certificate names something else than the
  target) and a bearer token sent with every call (``token``).
"""

from __future__ import annotations

import itertools
import socket
import threading
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..core import owners
from .._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING


class _Token(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every call."""

    def __init__(self, token: str):
        self._md = ("authorization", f"Bearer {token}")

    def _details(self, details):
        md = list(details.metadata or []) + [self._md]
        return details._replace(metadata=md) if hasattr(details, "_replace") else _Details(details, md)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, base, metadata):
        self.method, self.timeout, self.credentials = base.method, base.timeout, base.credentials
        self.wait_for_ready, self.compression = base.wait_for_ready, base.compression
        self.metadata = metadata


def split_targets(target) -> list[str]:
    items = [target] if isinstance(target, str) else list(target)
    out = [t.strip() for item in items for t in item.split(",") if t.strip()]
    if not out:
        raise ValueError("no target given")
    return list(dict.fromkeys(out))


def resolve_all(target: str) -> list[str]:
    """``name:port`` -> ``addr:port`` for every address the name has (IPv6 in brackets)."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    addresses = dict.fromkeys(str(info[4][0]) for info in infos)
    return [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses]


class Endpoint:
    def __init__(self, target: str, options: list, credentials, interceptors: list):
        self.target = target
        self.raw = grpc.secure_channel(target, credentials, options) if credentials is not None \
            else grpc.insecure_channel(target, options)
        self.channel = grpc.intercept_channel(self.raw, *interceptors) if interceptors else self.raw
        self.stub = pb_grpc.MultimodalPreprocessorStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.serving: bool | None = None  # None: not asked yet
        self.replica: str | None = None

    def learn(self, call) -> None:
        """Note the replica named in a finished call's trailing metadata."""
        try:
            metadata = call.trailing_metadata() or ()
        except Exception:
            return
        for key, value in metadata:
            if key == owners.METADATA_KEY:
                owner = owners.parse(value)
                if owner is not None:
                    self.replica = owner.replica

    def check(self, timeout: float) -> str:
        """Health status name (UNAVAILABLE etc. when it does not answer); updates ``serving``."""
        try:
            resp, call = self.health.Check.with_call(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError as e:
            self.serving = False
            return e.code().name
        self.learn(call)
        self.serving = resp.status == SERVING
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    def close(self) -> None:
        self.raw.close()


def answered_by_service(error: grpc.RpcError) -> bool:
    """True when the service itself answered (its owner tag is in the trailing metadata):
    the status is about the request, not about reaching the server."""
    try:
        return any(k == owners.METADATA_KEY for k, _ in (error.trailing_metadata() or ()))
    except Exception:
        return False


class Endpoints:
    def __init__(
        self, target, *, options: list, tls: bool = False, tls_ca: str | None = None, tls_cert: str | None = None,
        tls_key: str | None = None, tls_server_name: str | None = None, token: str | None = None,
        resolve: bool = False, health_interval: float = 1.0, resolve_interval: float = 30.0,
    ):
        self.given = split_targets(target)
        self._resolve = resolve
        self._options = list(options)
        if tls_server_name:
            self._options.append(("grpc.ssl_target_name_override", tls_server_name))
        elif resolve and (tls or tls_ca or tls_cert):
            # dialled by address: the certificate still names the host that was resolved
            self._options.append(("grpc.ssl_target_name_override", self.given[0].rpartition(":")[0].strip("[]")))
        self._credentials = None
        if tls or tls_ca or tls_cert:
            if bool(tls_cert) != bool(tls_key):
                raise ValueError("tls_cert and tls_key go together")
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=Path(tls_ca).read_bytes() if tls_ca else None,
                private_key=Path(tls_key).read_bytes() if tls_key else None,
                certificate_chain=Path(tls_cert).read_bytes() if tls_cert else None,
            )
        self._interceptors = [_Token(token)] if token else []
        self._lock = threading.Lock()
        self.endpoints: list[Endpoint] = [self._endpoint(t) for t in self._targets()]
        self._rr = itertools.count()
        self._stop = threading.Event()
        self._thread = None
        self.health_interval = health_interval
        self.resolve_interval = resolve_interval
        if len(self.endpoints) > 1 or resolve:
            self._thread = threading.Thread(target=self._watch, name="sglang-mm-client-health", daemon=True)
            self._thread.start()

    def _targets(self) -> list[str]:
        if not self._resolve:
            return self.given
        out = []
        for t in self.given:
            out += resolve_all(t)
        return out

    def _endpoint(self, target: str) -> Endpoint:
        return Endpoint(target, self._options, self._credentials, self._interceptors)

    def _watch(self) -> None:
        next_resolve = self.resolve_interval
        waited = 0.0
        while not self._stop.is_set():
            for ep in list(self.endpoints):
                if self._stop.is_set():
                    return
                ep.check(timeout=max(0.2, min(2.0, self.health_interval)))
            if self._resolve and waited >= next_resolve:
                next_resolve = waited + self.resolve_interval
                self._refresh()
            self._stop.wait(self.health_interval)
            waited += self.health_interval

    def _refresh(self) -> None:
        try:
            wanted = self._targets()
        except OSError:
            return  # keep what we have while DNS is unhappy
        with self._lock:
            have = {ep.target: ep for ep in self.endpoints}
            self.endpoints = [have.get(t) or self._endpoint(t) for t in wanted]
            gone = [ep for t, ep in have.items() if t not in wanted]
        for ep in gone:
            ep.close()

    # -- picking ----------------------------------------------------------------------

    def order(self) -> list[Endpoint]:
        """Every endpoint, the next one in round-robin order first, SERVING ones before the rest."""
        with self._lock:
            eps = list(self.endpoints)
        start = next(self._rr) % len(eps)
        rotated = eps[start:] + eps[:start]
        return [e for e in rotated if e.serving is not False] + [e for e in rotated if e.serving is False]

    def call_any(self, method: str, request, timeout):
        """``method`` on the next healthy endpoint; on to the next one when it cannot be
        reached (only with several targets)."""
        candidates = self.order()
        last: Exception | None = None
        for ep in candidates:
            try:
                resp, call = getattr(ep.stub, method).with_call(request, timeout=timeout)
            except grpc.RpcError as e:
                ep.learn(e)
                if len(candidates) == 1 or e.code() != grpc.StatusCode.UNAVAILABLE or answered_by_service(e):
                    raise
                ep.serving = False
                last = e
                continue
            ep.learn(call)
            return resp
        if last is None:  # no candidate (every one either answers, raises or sets ``last``)
            raise ValueError("no target to call")
        raise last

    def for_owner(self, handle: str) -> list[Endpoint]:
        """The endpoints to try for ``handle``: its owner's first (when known)."""
        owner = owners.owner_of(handle)
        with self._lock:
            eps = list(self.endpoints)
        if owner is None or len(eps) == 1:
            return eps
        known = [e for e in eps if e.replica == owner.replica]
        if not known and any(e.replica is None for e in eps):
            for e in eps:
                if e.replica is None:
                    e.check(timeout=2.0)
            known = [e for e in eps if e.replica == owner.replica]
        return known + [e for e in eps if e not in known and e.replica is None]

    def call_owner(self, handle: str, method: str, request, timeout):
        """``method`` on the target whose replica owns ``handle``."""
        candidates = self.for_owner(handle)
        if not candidates:
            owner = owners.owner_of(handle)
            raise ValueError(f"no target serves replica {owner.replica if owner else '?'}, which owns this handle")
        last: Exception | None = None
        for ep in candidates:
            try:
                resp, call = getattr(ep.stub, method).with_call(request, timeout=timeout)
            except grpc.RpcError as e:
                ep.learn(e)
                if e.code() == grpc.StatusCode.FAILED_PRECONDITION and ep is not candidates[-1]:
                    last = e
                    continue  # not this replica's: the next one may be the owner
                raise
            ep.learn(call)
            return resp
        if last is None:  # no candidate (every one either answers, raises or sets ``last``)
            raise ValueError("no target to call")
        raise last

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            eps, self.endpoints = list(self.endpoints), []
        for ep in eps:
            ep.close()
