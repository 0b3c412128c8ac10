"""``serve --processes N`` on a real port: both processes serve it, a handle names its
owner and Assemble/Release reaching the other process are forwarded to it, GetStats sums
the processes, a taken port is still an error, a killed process is restarted, and
SIGTERM stops them all with exit 0. (That the kernels compile once, the first process
filling a cold cache and the others only loading it, is checked by the fresh-clone test,
the suite's one cold compile.)"""

from __future__ import annotations

import os
import re
import signal
import socket

import grpc
import numpy as np
import pytest

import imagegen
from servers import LOOPBACK, Server, run_cli, wait_until
from sglang_mm_grpc.core import owners
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from sglang_mm_grpc.client import payload_arrays
from sglang_mm_grpc.server.siblings import PROCESSES, SCOPE, merge_stats

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
OWN = LOOPBACK + [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", 256 << 20)]
#: The fixture server's caller: a handle is its maker's alone, and without a token every
#: connection would be a caller of its own; these tests use a connection per process.
TOKENS = ("procs-token", "another-token")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("procs")
    (d / "tokens").write_text("\n".join(TOKENS) + "\n")
    s = Server(d, "--processes", "2", "--cache-bytes", "0", "--auth-token-file", str(d / "tokens"), models=[QWEN2],
               name="procs")
    yield s
    s.stop()


class _Token(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, token: str):
        self.metadata = (("authorization", f"Bearer {token}"),)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(details._replace(metadata=[*(details.metadata or ()), *self.metadata]), request)


def _channel(target: str, token: str = TOKENS[0]) -> grpc.Channel:
    """A channel of its own (a connection of its own) whose calls carry ``token``."""
    return grpc.intercept_channel(grpc.insecure_channel(target, OWN), _Token(token))


def _request(seed: int = 1) -> pb.PreprocessRequest:
    return pb.PreprocessRequest(model=QWEN2, images=[pb.MediaItem(data=imagegen.jpeg(120, 90, seed=seed))])


@pytest.fixture(scope="module")
def by_process(server):
    """Channels by the process that took their connection (own connections until both
    processes have some)."""
    found: dict[str, list[grpc.Channel]] = {}
    channels = []
    for _ in range(64):
        ch = _channel(server.target)
        channels.append(ch)
        _, call = pb_grpc.MultimodalPreprocessorStub(ch).ListModels.with_call(pb.ListModelsRequest(), timeout=30)
        found.setdefault(dict(call.trailing_metadata())[owners.METADATA_KEY], []).append(ch)
        if len(found) == 2 and min(len(v) for v in found.values()) >= 2:
            break
    assert len(found) == 2, f"every connection went to {list(found)}"
    yield found
    for ch in channels:
        ch.close()


def test_both_processes_serve_and_name_themselves(server, by_process):
    procs = sorted(by_process)
    assert [owners.parse(p).process for p in procs] == [0, 1]
    assert len({owners.parse(p).replica for p in procs}) == 1
    for owner, channels in by_process.items():
        r = pb_grpc.MultimodalPreprocessorStub(channels[0]).Preprocess(_request(), timeout=30)
        assert r.handle.endswith("@" + owner) and owners.owner_of(r.handle) == owners.parse(owner)


def test_assemble_and_release_reach_the_owner(server, by_process):
    (a, a_channels), (b, b_channels) = sorted(by_process.items())
    stub_a, stub_b = (pb_grpc.MultimodalPreprocessorStub(c[0]) for c in (a_channels, b_channels))
    for maker, other in ((stub_a, stub_b), (stub_b, stub_a)):
        kept = maker.Preprocess(_request(seed=3), timeout=30)
        local = maker.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_VLLM), timeout=30)
        forwarded, call = other.Assemble.with_call(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_VLLM),
                                                   timeout=30)
        assert dict(call.trailing_metadata())[owners.METADATA_KEY] != str(owners.owner_of(kept.handle))
        for name, arr in payload_arrays(local.payload).items():
            assert np.array_equal(arr, payload_arrays(forwarded.payload)[name]), name
        assert other.Release(pb.ReleaseRequest(handle=kept.handle), timeout=30).released
        assert not other.Release(pb.ReleaseRequest(handle=kept.handle), timeout=30).released
        with pytest.raises(grpc.RpcError) as e:
            other.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_VLLM), timeout=30)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "released" in e.value.details()


def test_a_forwarded_call_keeps_its_caller(server, by_process):
    """The owner process holds the handle to the caller that made it, whichever process
    the call reached: another token gets NOT_FOUND there too."""
    (_, a_channels), (b, _) = sorted(by_process.items())
    kept = pb_grpc.MultimodalPreprocessorStub(a_channels[0]).Preprocess(_request(seed=5), timeout=30)
    for _ in range(64):  # a connection of the other token that lands on the other process
        with _channel(server.target, TOKENS[1]) as ch:
            stub = pb_grpc.MultimodalPreprocessorStub(ch)
            _, call = stub.ListModels.with_call(pb.ListModelsRequest(), timeout=30)
            if dict(call.trailing_metadata())[owners.METADATA_KEY] != b:
                continue
            with pytest.raises(grpc.RpcError) as e:
                stub.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_VLLM), timeout=30)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert not stub.Release(pb.ReleaseRequest(handle=kept.handle), timeout=30).released
            break
    else:
        pytest.fail("no connection reached the other process")
    assert pb_grpc.MultimodalPreprocessorStub(a_channels[0]).Release(pb.ReleaseRequest(handle=kept.handle),
                                                                     timeout=30).released


def test_assemble_release_in_one_call_through_the_other_process(server, by_process):
    (_, a_channels), (_, b_channels) = sorted(by_process.items())
    kept = pb_grpc.MultimodalPreprocessorStub(a_channels[0]).Preprocess(_request(seed=4), timeout=30)
    other = pb_grpc.MultimodalPreprocessorStub(b_channels[0])
    r = other.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_SGLANG, release=True), timeout=30)
    assert r.payload.WhichOneof("mm_inputs") == "sglang"
    with pytest.raises(grpc.RpcError) as e:
        other.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_SGLANG), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_handles_naming_no_such_process_or_another_replica(server, by_process):
    (owner, channels), = list(by_process.items())[:1]
    stub = pb_grpc.MultimodalPreprocessorStub(channels[0])
    replica = owners.parse(owner).replica
    with pytest.raises(grpc.RpcError) as e:
        stub.Assemble(pb.AssembleRequest(handle=f"{'0' * 32}@{replica}/7", backend=pb.BACKEND_VLLM), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "names process 7" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.Release(pb.ReleaseRequest(handle=f"{'0' * 32}@other-replica-9/0"), timeout=30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "belongs to replica other-replica-9" in e.value.details() and replica in e.value.details()


def test_stats_are_summed_over_the_processes(server, by_process):
    per = {}
    for owner, channels in by_process.items():
        stub = pb_grpc.MultimodalPreprocessorStub(channels[0])
        stub.Preprocess(_request(seed=9), timeout=30)
        per[owner], call = stub.GetStats.with_call(pb.GetStatsRequest(), metadata=[(SCOPE, "process")], timeout=30)
        assert dict(call.trailing_metadata())[PROCESSES] == "1"
    stub = pb_grpc.MultimodalPreprocessorStub(next(iter(by_process.values()))[0])
    total, call = stub.GetStats.with_call(pb.GetStatsRequest(), timeout=30)
    assert dict(call.trailing_metadata())[PROCESSES] == "2"
    one = {o: s for o, s in per.items()}
    assert total.max_in_flight == sum(s.max_in_flight for s in one.values())
    assert total.requests["Preprocess"] == sum(s.requests["Preprocess"] for s in one.values())
    assert total.images == sum(s.images for s in one.values())
    assert total.uptime_s >= max(s.uptime_s for s in one.values())
    stage = {h.stage: h for h in total.stages}["total"]
    parts = [{h.stage: h for h in s.stages}["total"] for s in one.values()]
    assert stage.count == sum(p.count for p in parts)
    assert list(stage.upper_bounds_ms) == list(parts[0].upper_bounds_ms)
    assert list(stage.bucket_counts) == [sum(b) for b in zip(*(p.bucket_counts for p in parts))]


def test_merge_stats_adds_keyed_rows():
    a = pb.GetStatsResponse(uptime_s=5, in_flight=1, requests={"Preprocess": 2},
                            statuses=[pb.StatusCount(method="Preprocess", code="OK", count=2)])
    b = pb.GetStatsResponse(uptime_s=7, in_flight=2, requests={"Preprocess": 1, "Assemble": 4},
                            statuses=[pb.StatusCount(method="Preprocess", code="OK", count=1),
                                      pb.StatusCount(method="Assemble", code="NOT_FOUND", count=3)])
    a.fetch.refusals["private_address"] = 1
    b.fetch.refusals["private_address"] = 2
    m = merge_stats([a, b])
    assert m.uptime_s == 7 and m.in_flight == 3
    assert dict(m.requests) == {"Preprocess": 3, "Assemble": 4}
    assert {(s.method, s.code): s.count for s in m.statuses} == {("Preprocess", "OK"): 3, ("Assemble", "NOT_FOUND"): 3}
    assert dict(m.fetch.refusals) == {"private_address": 3}


def _listening_socket(port: int = 0) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return s


def test_a_port_taken_by_another_program_is_an_error(server):
    with _listening_socket() as taken:
        port = taken.getsockname()[1]
        r = run_cli("serve", "--port", str(port), "--processes", "2", "--model", QWEN2)
    assert r.returncode == 1 and "in use" in r.stderr, r.stderr
    # also a port held by another serve --processes (its processes share it only among themselves)
    r = run_cli("serve", "--port", str(server.port), "--processes", "2", "--model", QWEN2)
    assert r.returncode == 1 and "in use" in r.stderr, r.stderr


def _pids(server) -> dict[int, int]:
    return {int(i): int(p) for i, p in re.findall(r"process (\d+) started \(pid (\d+)\)", server.log_text())}


def test_a_killed_process_is_restarted(server, by_process):
    """Runs last in this module: it kills one of the fixture's processes."""
    owner, channels = sorted(by_process.items())[1]
    index = owners.parse(owner).process
    other_channel = sorted(by_process.items())[0][1][0]
    kept = pb_grpc.MultimodalPreprocessorStub(channels[0]).Preprocess(_request(seed=11), timeout=30)
    old = _pids(server)[index]
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: f"process {index} warm again" in server.log_text(), 120), server.log_text()[-3000:]
    assert _pids(server)[index] != old
    stub = pb_grpc.MultimodalPreprocessorStub(other_channel)

    def assemble_code():
        try:
            stub.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_VLLM), timeout=30)
            return "OK"
        except grpc.RpcError as e:
            return None if e.code() == grpc.StatusCode.UNAVAILABLE else e.code().name  # still binding

    assert wait_until(assemble_code, 10) == "NOT_FOUND"  # its handles went with it
    # the new process serves (new connections reach it again) and forwarding to it works
    seen = set()
    for _ in range(64):
        with _channel(server.target) as ch:
            r, call = pb_grpc.MultimodalPreprocessorStub(ch).Preprocess.with_call(_request(seed=12), timeout=30)
            seen.add(dict(call.trailing_metadata())[owners.METADATA_KEY])
            if owners.owner_of(r.handle).process == index:
                assert stub.Release(pb.ReleaseRequest(handle=r.handle), timeout=30).released
                break
    assert owner in seen
    assert server.stop() == 0
    log = server.log_text()
    assert "Traceback" not in log.split("exited with")[-1]


def test_processes_with_tls_and_a_token(tmp_path):
    """Forwarding and the summed GetStats carry the caller's token between processes."""
    from certs import make_ca

    ca = make_ca(tmp_path, "ca")
    cert = ca.issue(tmp_path, "server")
    token = "tok-" + "x" * 20
    s = Server(tmp_path, "--processes", "2", "--tls-cert", str(cert.cert), "--tls-key", str(cert.key),
               "--auth-token-env", "MM_TOKEN", models=[QWEN2], env={"MM_TOKEN": token}, wait=False, name="tls-procs")
    creds = grpc.ssl_channel_credentials(root_certificates=ca.cert.read_bytes())
    md = [("authorization", f"Bearer {token}")]
    channels = []
    try:
        def serving():
            with grpc.secure_channel(s.target, creds) as ch:
                try:
                    from grpc_health.v1 import health_pb2, health_pb2_grpc

                    r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
                    return r.status == health_pb2.HealthCheckResponse.SERVING
                except grpc.RpcError:
                    return False

        assert wait_until(lambda: serving() or not s.alive(), 120) and s.alive(), s.log_text()[-3000:]
        found: dict[str, grpc.Channel] = {}
        for _ in range(64):
            ch = grpc.secure_channel(s.target, creds, [("grpc.use_local_subchannel_pool", 1)])
            channels.append(ch)
            _, call = pb_grpc.MultimodalPreprocessorStub(ch).ListModels.with_call(
                pb.ListModelsRequest(), metadata=md, timeout=30)
            found.setdefault(dict(call.trailing_metadata())[owners.METADATA_KEY], ch)
            if len(found) == 2:
                break
        assert len(found) == 2
        a, b = (pb_grpc.MultimodalPreprocessorStub(ch) for ch in found.values())
        kept = a.Preprocess(_request(seed=5), metadata=md, timeout=30)
        r = b.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_VLLM, release=True), metadata=md,
                       timeout=30)
        assert list(r.payload.input_ids) == list(kept.input_ids)
        stats, call = b.GetStats.with_call(pb.GetStatsRequest(), metadata=md, timeout=30)
        assert dict(call.trailing_metadata())[PROCESSES] == "2" and stats.requests["Preprocess"] == 1
        with pytest.raises(grpc.RpcError) as e:
            b.GetStats(pb.GetStatsRequest(), timeout=30)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        for ch in channels:
            ch.close()
        assert s.stop() == 0
