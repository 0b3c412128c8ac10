"""What an unauthenticated caller can learn from a server with TLS and tokens: nothing
beyond "authenticate first". One real server (mTLS, a token file, --metrics-port) on
127.0.0.1, certificates made at test time.

* ``/metrics`` is HTTPS with the gRPC port's certificate, needs a client certificate under
  mTLS and the bearer token (401 otherwise), and listens on loopback whatever --host is;
* an unknown method answers UNAUTHENTICATED before authentication, UNIMPLEMENTED after;
* health ``Check`` / ``Watch`` without a token answer the same for a real service name and
  a made-up one (the overall status), and carry no owner tag; with the token they answer
  as before, owner tag included, which the multi-target client relies on."""

from __future__ import annotations

import http.client
import socket
import ssl
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from certs import channel_credentials as _creds, make_pki
from servers import Server, free_port
from sglang_mm_grpc.core import owners
from sglang_mm_grpc.client.endpoints import Endpoints

LLAVA = "llava-hf/llava-1.5-7b-hf"
TOKEN = "hardening-token-for-tests"
OTHER_TOKEN = "second-accepted-token"
SERVICE = "sglang_mm.v1.MultimodalPreprocessor"
SERVING = health_pb2.HealthCheckResponse.SERVING
AUTH = [("authorization", f"Bearer {TOKEN}")]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(pki, tmp_path_factory):
    """mTLS, two tokens from a file, metrics on a port of their own."""
    d = tmp_path_factory.mktemp("hardening")
    token_file = d / "tokens"
    token_file.write_text(f"{TOKEN}\n{OTHER_TOKEN}\n")
    metrics_port = free_port()
    s = Server(d, "--tls-cert", str(pki["server"].cert), "--tls-key", str(pki["server"].key),
               "--tls-client-ca", str(pki["ca"].cert), "--auth-token-file", str(token_file),
               "--metrics-port", str(metrics_port), models=[LLAVA], wait=False, name="hardening")
    s.metrics_port = metrics_port
    try:
        end = time.monotonic() + 180
        with grpc.secure_channel(s.target, _creds(pki, "client")) as ch:
            while True:
                assert s.alive(), s.log_text()[-3000:]
                assert time.monotonic() < end, f"not SERVING:\n{s.log_text()[-3000:]}"
                try:
                    r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if r.status == SERVING:
                        break
                except grpc.RpcError:
                    pass
                time.sleep(0.05)
        yield s
    finally:
        s.stop()


@pytest.fixture
def channel(server, pki):
    with grpc.secure_channel(server.target, _creds(pki, "client")) as ch:
        yield ch


# -- /metrics ------------------------------------------------------------------------


def _scrape(server, pki, *, authorization=None, cert="client", timeout=10.0):
    """(status, body) of GET /metrics over HTTPS, trusting the test CA."""
    ctx = ssl.create_default_context(cafile=str(pki["ca"].cert))
    if cert:
        ctx.load_cert_chain(str(pki[cert].cert), str(pki[cert].key))
    conn = http.client.HTTPSConnection("127.0.0.1", server.metrics_port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": authorization} if authorization else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_metrics_need_the_bearer_token(server, pki):
    for authorization in (None, "Bearer wrong", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN, "Bearer "):
        status, body = _scrape(server, pki, authorization=authorization)
        assert status == 401, authorization
        assert b"sglang_mm_" not in body and b"bearer token" in body
    for token in (TOKEN, OTHER_TOKEN):
        status, body = _scrape(server, pki, authorization=f"Bearer {token}")
        assert status == 200
        assert b"sglang_mm_uptime_seconds" in body and b"sglang_mm_requests_total" in body
    status, _ = _scrape(server, pki, authorization=f"bearer   {TOKEN}")
    assert status == 200


def test_metrics_are_not_served_in_plaintext(server):
    with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=10) as s:
        s.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                  "Connection: close\r\n\r\n".encode())
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except OSError:
            pass
    assert b"sglang_mm_" not in data and not data.startswith(b"HTTP/")


@pytest.mark.parametrize("cert", [None, "stranger"])
def test_metrics_under_mtls_need_a_client_certificate(server, pki, cert):
    with pytest.raises(OSError):  # ssl.SSLError, a reset or a closed connection
        _scrape(server, pki, authorization=f"Bearer {TOKEN}", cert=cert)
    assert server.alive()
    assert _scrape(server, pki, authorization=f"Bearer {TOKEN}")[0] == 200  # still answering others


def test_a_stalled_metrics_client_holds_up_no_one(server, pki):
    with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=10):  # never says hello
        t0 = time.monotonic()
        assert _scrape(server, pki, authorization=f"Bearer {TOKEN}", timeout=5)[0] == 200
        assert time.monotonic() - t0 < 5


def test_metrics_listen_on_loopback_whatever_the_host(server, monkeypatch):
    import sglang_mm_grpc.server.launch as launch
    from sglang_mm_grpc.cli.commands import main

    seen = []
    monkeypatch.setattr(launch, "run", lambda config: seen.append(config) or 0)
    assert main(["serve", "--host", "0.0.0.0", "--metrics-port", "9100", "--model", LLAVA]) == 0
    assert (seen[-1].host, seen[-1].metrics_host) == ("0.0.0.0", "127.0.0.1")
    assert main(["serve", "--host", "0.0.0.0", "--metrics-port", "9100", "--metrics-host", "0.0.0.0"]) == 0
    assert seen[-1].metrics_host == "0.0.0.0"
    # the running server says where and how it serves them
    assert f"metrics on https://127.0.0.1:{server.metrics_port}/metrics (bearer token required)" in server.log_text()


# -- methods before authentication ----------------------------------------------------


@pytest.mark.parametrize("method", [f"/{SERVICE}/NoSuchMethod", "/no.such.Service/Method",
                                    "/grpc.health.v1.Health/List"])
def test_an_unknown_method_is_unauthenticated_without_the_token(channel, method):
    unary = channel.unary_unary(method)
    for metadata in (None, [("authorization", "Bearer wrong")]):
        with pytest.raises(grpc.RpcError) as e:
            unary(b"", timeout=10, metadata=metadata)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "bearer token" in e.value.details()
    bidi = channel.stream_stream(method)
    with pytest.raises(grpc.RpcError) as e:
        list(bidi(iter([b"", b""]), timeout=10))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as e:  # only an authenticated caller learns it is not there
        unary(b"", timeout=10, metadata=AUTH)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


# -- health before authentication ------------------------------------------------------


def _check(channel, service, metadata=None):
    """(status name or error code name, trailing metadata as a dict)."""
    try:
        resp, call = health_pb2_grpc.HealthStub(channel).Check.with_call(
            health_pb2.HealthCheckRequest(service=service), timeout=10, metadata=metadata)
    except grpc.RpcError as e:
        return e.code().name, dict(e.trailing_metadata() or ())
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status), dict(call.trailing_metadata() or ())


def test_health_check_tells_no_service_names_without_the_token(channel):
    for metadata in (None, [("authorization", "Bearer wrong")]):
        answers = {name: _check(channel, name, metadata)[0] for name in ("", SERVICE, "no.such.Service", "grpc.x")}
        assert set(answers.values()) == {"SERVING"}, answers  # the overall status, whatever is named
    assert _check(channel, SERVICE, AUTH)[0] == "SERVING"
    assert _check(channel, "no.such.Service", AUTH)[0] == "NOT_FOUND"  # authenticated: the truth


def _first_watch(channel, service, metadata=None) -> str:
    stream = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service=service), timeout=10, metadata=metadata)
    try:
        return health_pb2.HealthCheckResponse.ServingStatus.Name(next(stream).status)
    finally:
        stream.cancel()


def test_health_watch_tells_no_service_names_without_the_token(channel):
    assert _first_watch(channel, "no.such.Service") == "SERVING"
    assert _first_watch(channel, SERVICE) == "SERVING"
    assert _first_watch(channel, "") == "SERVING"
    assert _first_watch(channel, "no.such.Service", AUTH) == "SERVICE_UNKNOWN"


def test_health_names_the_owner_only_to_authenticated_callers(channel):
    for metadata in (None, [("authorization", "Bearer wrong")]):
        for service in ("", SERVICE, "no.such.Service"):
            status, trailing = _check(channel, service, metadata)
            assert status == "SERVING"
            assert owners.METADATA_KEY not in trailing, (service, metadata)
    status, trailing = _check(channel, "", AUTH)
    assert status == "SERVING" and owners.parse(trailing[owners.METADATA_KEY]) is not None
    # a refused call names no owner either
    with pytest.raises(grpc.RpcError) as e:
        channel.unary_unary(f"/{SERVICE}/ListModels")(b"", timeout=10)
    assert owners.METADATA_KEY not in dict(e.value.trailing_metadata() or ())


def test_the_multi_target_client_learns_owners_with_its_token(server, pki):
    kw = dict(options=[], tls_ca=str(pki["ca"].cert), tls_cert=str(pki["client"].cert),
              tls_key=str(pki["client"].key), health_interval=3600)
    with_token = Endpoints([server.target], token=TOKEN, **kw)
    without = Endpoints([server.target], **kw)
    try:
        assert with_token.endpoints[0].check(timeout=10) == "SERVING"
        assert with_token.endpoints[0].replica == owners.default_replica_id(server.port)
        assert without.endpoints[0].check(timeout=10) == "SERVING"
        assert without.endpoints[0].replica is None
    finally:
        with_token.close()
        without.close()
