"""TLS, mTLS and bearer tokens, end to end: real servers with certificates made at test
time, the client library and the CLI, accepted and refused cases. Health stays
reachable without a token (probes), over the same TLS."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import imagegen
from certs import channel_credentials as _creds, make_ca, make_pki
from servers import REPO, Server
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from sglang_mm_grpc.client import Client
from sglang_mm_grpc.server.gate import load_tokens

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
TOKEN = "s3cret-token-for-tests"
IDS = [151652, 151655, 151653]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _wait_tls(server: Server, credentials, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    with grpc.secure_channel(server.target, credentials) as ch:
        while time.monotonic() < end:
            assert server.alive(), server.log_text()[-3000:]
            try:
                r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
    raise AssertionError(f"not SERVING:\n{server.log_text()[-3000:]}")


@pytest.fixture(scope="module")
def mtls_server(pki, tmp_path_factory):
    """mTLS (clients need a certificate from test-ca) and a token from a file."""
    d = tmp_path_factory.mktemp("mtls")
    token_file = d / "tokens"
    token_file.write_text(f"\n  {TOKEN}  \nrotated-old-token\n")
    s = Server(d, "--tls-cert", str(pki["server"].cert), "--tls-key", str(pki["server"].key),
               "--tls-client-ca", str(pki["ca"].cert), "--auth-token-file", str(token_file),
               models=[QWEN2], wait=False, name="mtls")
    try:
        _wait_tls(s, _creds(pki, cert="client"))
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def tls_server(pki, tmp_path_factory):
    """TLS without client certificates, the token from an environment variable."""
    s = Server(tmp_path_factory.mktemp("tls"), "--tls-cert", str(pki["server"].cert), "--tls-key",
               str(pki["server"].key), "--auth-token-env", "MM_TOKEN", models=[QWEN2], wait=False, name="tls",
               env={"MM_TOKEN": TOKEN})
    try:
        _wait_tls(s, _creds(pki))
        yield s
    finally:
        s.stop()


def _image():
    return imagegen.jpeg(64, 48, seed=5)


def test_mtls_with_token_serves_both_flows(mtls_server, pki):
    with Client(mtls_server.target, tls_ca=str(pki["ca"].cert), tls_cert=str(pki["client"].cert),
                tls_key=str(pki["client"].key), token=TOKEN) as c:
        r = c.preprocess(QWEN2, [_image()], input_ids=IDS)
        assert r.handle and len(r.images) == 1
        payload = c.assemble(r.handle, "vllm", release=True)
        assert list(payload.input_ids) == list(r.input_ids)
        one = c.preprocess(QWEN2, [_image()], input_ids=IDS, backend="sglang")
        assert one.payload.WhichOneof("mm_inputs") == "sglang"
        assert c.health() == "SERVING"


def test_every_token_in_the_file_is_accepted(mtls_server, pki):
    with Client(mtls_server.target, tls_ca=str(pki["ca"].cert), tls_cert=str(pki["client"].cert),
                tls_key=str(pki["client"].key), token="rotated-old-token") as c:
        assert [m.name for m in c.list_models()] == [QWEN2]


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x", TOKEN[:-1], ""])
def test_missing_or_wrong_token_is_unauthenticated(mtls_server, pki, token):
    with Client(mtls_server.target, tls_ca=str(pki["ca"].cert), tls_cert=str(pki["client"].cert),
                tls_key=str(pki["client"].key), token=token or None) as c:
        for call in (lambda: c.preprocess(QWEN2, [_image()]), c.list_models,
                     lambda: c.assemble("0" * 32, "vllm"), lambda: c.release("0" * 32)):
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "bearer token" in e.value.details()
        assert c.health() == "SERVING"  # probes need no token


def test_a_token_in_another_scheme_is_refused(mtls_server, pki):
    with grpc.secure_channel(mtls_server.target, _creds(pki, cert="client")) as ch:
        stub = pb_grpc.MultimodalPreprocessorStub(ch)
        for value in (TOKEN, f"Basic {TOKEN}", f"Bearer{TOKEN}"):
            with pytest.raises(grpc.RpcError) as e:
                stub.ListModels(pb.ListModelsRequest(), metadata=[("authorization", value)], timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        resp = stub.ListModels(pb.ListModelsRequest(), metadata=[("authorization", f"bearer   {TOKEN}")], timeout=10)
        assert resp.models


def test_reflection_needs_the_token(mtls_server, pki):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.secure_channel(mtls_server.target, _creds(pki, cert="client")) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        req = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as e:
            list(stub.ServerReflectionInfo(iter([req]), timeout=10))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        answers = list(stub.ServerReflectionInfo(iter([req]), timeout=10,
                                                 metadata=[("authorization", f"Bearer {TOKEN}")]))
        names = {s.name for s in answers[0].list_services_response.service}
        assert "sglang_mm.v1.MultimodalPreprocessor" in names


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate", "plaintext"])
def test_mtls_refuses_clients_without_a_good_certificate(mtls_server, pki, who):
    if who == "plaintext":
        ch = grpc.insecure_channel(mtls_server.target)
    else:
        ch = grpc.secure_channel(mtls_server.target, _creds(pki, cert=None if who == "no certificate" else "stranger"))
    with ch:
        with pytest.raises(grpc.RpcError) as e:  # health too: nothing passes the handshake
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert mtls_server.alive()


def test_tls_server_with_env_token(tls_server, pki):
    with Client(tls_server.target, tls_ca=str(pki["ca"].cert), token=TOKEN) as c:
        r = c.preprocess(QWEN2, [_image()], input_ids=IDS)
        assert c.release(r.handle)
    with Client(tls_server.target, tls_ca=str(pki["ca"].cert)) as c:
        with pytest.raises(grpc.RpcError) as e:
            c.list_models()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert c.health() == "SERVING"


def test_tls_refuses_a_client_that_does_not_trust_its_ca(tls_server, pki, tmp_path):
    other = make_ca(tmp_path, "unrelated-ca")
    with Client(tls_server.target, tls_ca=str(other.cert), token=TOKEN) as c:
        with pytest.raises(grpc.RpcError) as e:
            c.list_models(timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "sglang_mm_grpc.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, **(env or {})})


def test_cli_preprocess_with_mtls_and_token(mtls_server, pki, tmp_path):
    image = tmp_path / "cat.jpg"
    image.write_bytes(_image())
    tls = ["--tls-ca", str(pki["ca"].cert), "--tls-cert", str(pki["client"].cert), "--tls-key", str(pki["client"].key)]
    ok = _cli("preprocess", "--target", mtls_server.target, "--model", QWEN2, *tls, "--auth-token-env", "MM_T",
              "--backend", "vllm", str(image), env={"MM_T": TOKEN})
    assert ok.returncode == 0, ok.stderr
    assert "vllm payload" in ok.stdout
    bad = _cli("preprocess", "--target", mtls_server.target, "--model", QWEN2, *tls, "--auth-token-env", "MM_T",
               str(image), env={"MM_T": "nope"})
    assert bad.returncode == 1 and "UNAUTHENTICATED" in bad.stderr
    token_file = tmp_path / "t"
    token_file.write_text(TOKEN + "\n")
    ok2 = _cli("preprocess", "--target", mtls_server.target, "--model", QWEN2, *tls, "--auth-token-file",
               str(token_file), str(image))
    assert ok2.returncode == 0, ok2.stderr


def test_serve_refuses_half_configured_tls(tmp_path, pki):
    r = _cli("serve", "--port", "0", "--tls-cert", str(pki["server"].cert))
    assert r.returncode == 2 and "--tls-cert and --tls-key go together" in r.stderr
    r = _cli("serve", "--port", "0", "--tls-client-ca", str(pki["ca"].cert))
    assert r.returncode == 2 and "needs --tls-cert" in r.stderr
    r = _cli("serve", "--port", "0", "--tls-cert", str(tmp_path / "none.crt"), "--tls-key", str(pki["server"].key))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = _cli("serve", "--port", "0", "--auth-token-env", "MM_UNSET_VARIABLE", env={"MM_UNSET_VARIABLE": ""})
    assert r.returncode == 2 and "MM_UNSET_VARIABLE" in r.stderr


def test_load_tokens(tmp_path):
    f = tmp_path / "tokens"
    f.write_text("a\n\n  b  \n")
    assert load_tokens(str(f)) == [b"a", b"b"]
    assert load_tokens(None, "T", environ={"T": " c "}) == [b"c"]
    assert load_tokens(str(f), "T", environ={"T": "c"}) == [b"a", b"b", b"c"]
    assert load_tokens() is None
    (tmp_path / "empty").write_text("\n \n")
    with pytest.raises(ValueError, match="holds no token"):
        load_tokens(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="unset or empty"):
        load_tokens(None, "T", environ={})
