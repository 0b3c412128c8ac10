"""``sglang-mm-grpc call`` hardened, the real CLI as a subprocess against real servers: the
same TLS and token options as ``preprocess --target`` (reflection and the call both carry
them; a missing token is UNAUTHENTICATED with what to give), and a request's JSON nested
absurdly deep is a one-line error with the bad-input exit code, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from certs import make_ca
from servers import REPO, Server, free_port, wait_until

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
TOKEN = "call-token-for-tests"


def cli(*args: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_mm_grpc.cli", *args], capture_output=True, text=True,
                          input=stdin, timeout=120, cwd=REPO, env={**os.environ, **(env or {})})


def _clean(r: subprocess.CompletedProcess) -> None:
    """One error line, no traceback."""
    assert "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("call-pki")
    ca = make_ca(d, "call-ca")
    return {"ca": ca, "server": ca.issue(d, "server"), "client": ca.issue(d, "client", client=True, sans=())}


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("call-token") / "tokens"
    f.write_text(f"{TOKEN}\n")
    return f


@pytest.fixture(scope="module")
def token_server(tmp_path_factory, token_file):
    """Plaintext, a token required."""
    s = Server(tmp_path_factory.mktemp("call-token-server"), "--auth-token-file", str(token_file),
               "--log-level", "WARNING", models=[QWEN2], name="token")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory, pki, token_file):
    """mTLS (client certificates from the test CA) and a token."""
    s = Server(tmp_path_factory.mktemp("call-mtls-server"), "--tls-cert", str(pki["server"].cert),
               "--tls-key", str(pki["server"].key), "--tls-client-ca", str(pki["ca"].cert),
               "--auth-token-file", str(token_file), "--log-level", "WARNING", models=[QWEN2], name="mtls",
               wait=False)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki["ca"].cert.read_bytes(), private_key=pki["client"].key.read_bytes(),
        certificate_chain=pki["client"].cert.read_bytes())

    def serving() -> bool:
        assert s.alive(), s.log_text()[-3000:]
        with grpc.secure_channel(s.target, credentials) as ch:
            try:
                return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1).status \
                    == health_pb2.HealthCheckResponse.SERVING
            except grpc.RpcError:
                return False

    try:
        assert wait_until(serving, 180, 0.1), s.log_text()[-3000:]
        yield s
    finally:
        s.stop()


def _models(r: subprocess.CompletedProcess) -> list[str]:
    assert r.returncode == 0, r.stderr
    return [m["name"] for m in json.loads(r.stdout)["models"]]


def test_call_without_the_token_is_unauthenticated_and_says_what_to_give(token_server):
    r = cli("call", "ListModels", "--target", token_server.target)
    assert r.returncode == 1
    assert "UNAUTHENTICATED" in r.stderr and "--auth-token-file" in r.stderr, r.stderr
    _clean(r)


def test_call_with_the_token_from_a_file_or_the_environment(token_server, token_file, tmp_path):
    assert QWEN2 in _models(cli("call", "ListModels", "--target", token_server.target,
                                "--auth-token-file", str(token_file)))
    assert QWEN2 in _models(cli("call", "ListModels", "--target", token_server.target,
                                "--auth-token-env", "CALL_TOKEN", env={"CALL_TOKEN": TOKEN}))
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    r = cli("call", "ListModels", "--target", token_server.target, "--auth-token-file", str(wrong))
    assert r.returncode == 1 and "UNAUTHENTICATED" in r.stderr and "token given was refused" in r.stderr, r.stderr
    _clean(r)
    r = cli("call", "ListModels", "--target", token_server.target, "--auth-token-env", "UNSET_CALL_TOKEN",
            env={"UNSET_CALL_TOKEN": ""})
    assert r.returncode == 2 and "UNSET_CALL_TOKEN" in r.stderr, r.stderr
    _clean(r)


def test_call_over_mtls_with_the_ca_a_client_certificate_and_the_token(mtls_server, pki, token_file):
    ca = ["--tls-ca", str(pki["ca"].cert)]
    cert = ["--tls-cert", str(pki["client"].cert), "--tls-key", str(pki["client"].key)]
    token = ["--auth-token-file", str(token_file)]
    target = ["--target", mtls_server.target]
    assert QWEN2 in _models(cli("call", "ListModels", *target, *ca, *cert, *token))
    # the certificate names localhost and 127.0.0.1: an override to one of them is honoured ...
    assert QWEN2 in _models(cli("call", "ListModels", *target, *ca, *cert, *token, "--tls-server-name", "localhost"))
    # ... and one it does not name fails the handshake
    r = cli("call", "ListModels", *target, *ca, *cert, *token, "--tls-server-name", "elsewhere.example")
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr, r.stderr
    _clean(r)
    r = cli("call", "ListModels", *target, *ca, *cert)  # TLS fine, no token
    assert r.returncode == 1 and "UNAUTHENTICATED" in r.stderr, r.stderr
    _clean(r)
    r = cli("call", "ListModels", *target, *ca, *token)  # no client certificate: no handshake
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr, r.stderr
    _clean(r)
    r = cli("call", "ListModels", *target, *ca, "--tls-cert", str(pki["client"].cert), *token)
    assert r.returncode == 2 and "--tls-key" in r.stderr, r.stderr
    _clean(r)


def test_call_refuses_json_nested_100k_deep_in_one_line(token_server, token_file, tmp_path):
    deep = '{"model": ' + "[" * 100_000 + "]" * 100_000 + "}"
    request = tmp_path / "deep.json"
    request.write_text(deep)
    objects = tmp_path / "objects.json"
    objects.write_text('{"image_options": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001)
    inline = '{"model": ' + "[" * 60_000 + "]" * 60_000 + "}"  # within one argument's 128 KiB
    no_server = f"127.0.0.1:{free_port()}"  # refused before any connection
    for target in (no_server, token_server.target):
        for given, stdin in ((f"@{request}", None), ("@-", deep), (f"@{objects}", None), (inline, None)):
            r = cli("call", "Preprocess", given, "--target", target, "--auth-token-file", str(token_file),
                    stdin=stdin)
            assert r.returncode == 2, r.stderr[-2000:]
            assert "nested too deeply" in r.stderr and "limit is 200" in r.stderr, r.stderr[-2000:]
            _clean(r)


def test_call_json_nested_within_the_limit_reaches_protobuf(token_server, token_file):
    """At the limit the text parses as JSON and protobuf names what does not fit; brackets
    inside strings do not count; an ordinary request still works."""
    auth = ["--target", token_server.target, "--auth-token-file", str(token_file)]
    at_limit = '{"model": ' + "[" * 199 + "]" * 199 + "}"
    r = cli("call", "Preprocess", at_limit, *auth)
    assert r.returncode == 2 and "does not fit sglang_mm.v1.PreprocessRequest" in r.stderr, r.stderr[-2000:]
    _clean(r)
    nested_messages = '{"image_options": ' + '{"min_pixels": ' * 150 + "1" + "}" * 151
    r = cli("call", "Preprocess", nested_messages, *auth)
    assert r.returncode == 2 and "does not fit" in r.stderr, r.stderr[-2000:]
    _clean(r)
    r = cli("call", "GetServerInfo", json.dumps({}), *auth)
    assert r.returncode == 0, r.stderr
    r = cli("call", "Preprocess", json.dumps({"model": "[" * 60_000}), *auth)  # brackets in a string
    assert r.returncode == 1 and "nested" not in r.stderr, r.stderr[-2000:]
    _clean(r)
