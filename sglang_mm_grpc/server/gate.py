"""What every call passes before its handler: authentication, the drain, and the owner tag.

One server interceptor (``Gate``):

* **token**: with tokens configured, a call must carry ``authorization: Bearer <token>``
  matching one of them (compared with ``hmac.compare_digest``, every token, so the time
  taken says nothing about which matched); otherwise UNAUTHENTICATED. That holds for a
  method the server does not have too: only an authenticated caller learns UNIMPLEMENTED.
  Health ``Check`` and ``Watch`` need no token, so probes and load balancers can always
  ask; without one they answer the server's overall status whatever service is named
  (known and unknown names alike: no NOT_FOUND / SERVICE_UNKNOWN to tell real services
  from made-up ones) and carry no owner tag. Other health methods (``List``) need the token.
* **closing**: once the drain delay is over (``Server.stop``), every new call except
  health ``Check`` / ``Watch`` gets UNAVAILABLE ("shutting down; send it to another replica"), answered by the
  server itself rather than by a closed port or a cancelled stream (only a call that
  arrives in the instant the port closes is cancelled, by gRPC core: grpc/grpc#41785).
* **owner**: every unary response carries trailing metadata ``sglang-mm-owner`` with the
  answering process's owner id (``owners.py``); the multi-target client learns from it
  which target owns which handles (it sends its token on health checks too). With tokens
  configured, only authenticated callers get it (a health reply without a token does not).
* it counts the unary calls it let through that have not finished (response sent), so
  the drain knows when the last one is done.

TLS credentials (``server_credentials``) and tokens (``load_tokens``) are read here too, and
a call's caller identity (``caller_identity``: token, certificate or peer) is told here.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import os
from pathlib import Path

import grpc

from ..core.owners import METADATA_KEY

HEALTH_PREFIX = "/grpc.health.v1.Health/"
#: The health methods anyone may call (probes, load balancers), token or not.
OPEN_HEALTH = frozenset({HEALTH_PREFIX + "Check", HEALTH_PREFIX + "Watch"})
AUTHORIZATION = "authorization"


class Gate(grpc.aio.ServerInterceptor):
    def __init__(self, owner_id: str = "", tokens: list[bytes] | None = None):
        self.owner_metadata = ((METADATA_KEY, owner_id),) if owner_id else ()
        self.tokens = list(tokens) if tokens else None
        self.closing = False
        self.active = 0  # unary calls let through and not finished
        self.refused_unauthenticated = 0

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if details.method in OPEN_HEALTH and handler is not None:
            if self.tokens is None or self._authorized(details.invocation_metadata):
                return self._tagged(handler, count=False)
            return _anonymous_health(handler)
        # From here a method the server lacks (handler None) is refused like any other, so
        # an unauthenticated caller cannot tell which methods exist.
        if self.closing:
            return _refusal(handler, grpc.StatusCode.UNAVAILABLE,
                            "the server is shutting down (draining); send this call to another replica")
        if self.tokens is not None and not self._authorized(details.invocation_metadata):
            self.refused_unauthenticated += 1
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED,
                            "missing or invalid bearer token: send metadata 'authorization: Bearer <token>'")
        if handler is None:
            return None  # UNIMPLEMENTED, told only to an authenticated caller
        return self._tagged(handler, count=True)

    def _authorized(self, metadata) -> bool:
        presented = b""
        for key, value in metadata or ():
            if key == AUTHORIZATION:
                presented = bearer_token(value)
                break
        return token_accepted(presented, self.tokens)

    def _tagged(self, handler, *, count: bool):
        if handler.unary_unary is None or not (self.owner_metadata or count):
            return handler
        inner, gate = handler.unary_unary, self

        async def behavior(request, context):
            if gate.owner_metadata:
                context.set_trailing_metadata(gate.owner_metadata)
            if count:
                gate.active += 1
                context.add_done_callback(gate._finished)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            behavior, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _finished(self, _context) -> None:
        self.active -= 1


def bearer_token(value) -> bytes:
    """The token of an ``authorization`` value ``Bearer <token>`` (the scheme in any case);
    b"" for another scheme or none."""
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    scheme, _, token = text.strip().partition(" ")
    return token.strip().encode("utf-8", "replace") if scheme.lower() == "bearer" else b""


def token_accepted(presented: bytes, tokens) -> bool:
    """Whether ``presented`` is one of ``tokens``, compared with ``hmac.compare_digest``
    against every one of them, whatever matched (the time taken tells nothing)."""
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(presented, token)
    return ok and bool(presented)


def _anonymous_health(handler):
    """Health ``Check`` / ``Watch`` for a caller without a valid token: the server's
    overall status (service "") whatever service the request names, and no owner tag."""

    def overall(request):
        return type(request)() if request.service else request

    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def check(request, context):
            return await inner(overall(request), context)

        return grpc.unary_unary_rpc_method_handler(
            check, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        inner = handler.unary_stream

        async def streamed(request, context):
            async for response in inner(overall(request), context):
                yield response

        async def written(request, context):  # a handler that writes its responses to the context
            return await inner(overall(request), context)

        return grpc.unary_stream_rpc_method_handler(
            streamed if inspect.isasyncgenfunction(inner) else written,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


def caller_identity(context, tokens: bool) -> str:
    """Who is calling, for what is kept per caller (client-chosen media ids): with token
    authentication the token's hash (every holder of a token is one caller); else the
    client certificate's hash under mTLS; else the peer address (``ipv4:host:port``: one
    connection)."""
    if tokens:
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION:
                text = value.decode("latin-1") if isinstance(value, bytes) else value
                token = text.strip().partition(" ")[2].strip().encode("utf-8", "replace")
                return "token:" + hashlib.sha256(token).hexdigest()[:32]
    try:
        auth = context.auth_context() or {}
    except Exception:  # a context without one (tests' fakes)
        auth = {}
    cert = auth.get("x509_pem_cert")
    if cert:
        return "cert:" + hashlib.sha256(cert[0]).hexdigest()[:32]
    return "peer:" + (context.peer() or "")


def _refusal(handler, code: grpc.StatusCode, message: str):
    """A handler of the same kind as ``handler`` that answers ``code`` at once (for a
    method the server lacks, ``handler`` None: a streaming one, which reads nothing and
    so answers a call of any kind)."""

    async def refuse(_request, context):
        await context.abort(code, message)

    if handler is None or (handler.request_streaming and handler.response_streaming):
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


def load_tokens(token_file: str | None = None, token_env: str | None = None, environ=None) -> list[bytes] | None:
    """The accepted bearer tokens: one per non-empty line of ``token_file`` and/or the
    value of the environment variable named ``token_env``; None when neither is given.
    ValueError when a source is given but holds no token."""
    environ = os.environ if environ is None else environ
    tokens: list[bytes] = []
    if token_file:
        lines = Path(token_file).read_text(encoding="utf-8").splitlines()
        found = [line.strip() for line in lines if line.strip()]
        if not found:
            raise ValueError(f"token file {token_file} holds no token")
        tokens += [t.encode() for t in found]
    if token_env:
        value = environ.get(token_env, "").strip()
        if not value:
            raise ValueError(f"environment variable {token_env} (--auth-token-env) is unset or empty")
        tokens.append(value.encode())
    if not (token_file or token_env):
        return None
    return tokens


def read_pem(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what} {path} is not PEM")
    return data


def server_credentials(cert: str | None, key: str | None, client_ca: str | None = None) -> grpc.ServerCredentials:
    """TLS with this certificate chain and key (ValueError without both); with ``client_ca``,
    clients must present a certificate it signed (mTLS)."""
    if not (cert and key):
        raise ValueError("TLS needs both a certificate chain (--tls-cert) and its key (--tls-key)")
    pair = (read_pem(key, "TLS key (--tls-key)"), read_pem(cert, "TLS certificate (--tls-cert)"))
    ca = read_pem(client_ca, "client CA (--tls-client-ca)") if client_ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=ca, require_client_auth=ca is not None)
