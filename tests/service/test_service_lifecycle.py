"""Server lifecycle as an operator sees it: drain on SIGTERM, refuse to start half-configured."""

from __future__ import annotations

import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import imagegen
from servers import Server, free_port, run_cli
from service_support import QWEN2
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_sigterm_drains_in_flight_and_refuses_new(tmp_path):
    proc = Server(tmp_path, "--grace", "30", models=[QWEN2], name="drain")
    target = proc.target
    try:
        slow = pb.PreprocessRequest(model=QWEN2, images=[pb.MediaItem(data=imagegen.jpeg(1600, 1600, seed=1))] * 12)
        with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            stub = pb_grpc.MultimodalPreprocessorStub(ch)
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
            assert next(watch).status == SERVING

            in_flight = stub.Preprocess.future(slow, timeout=60)
            time.sleep(0.4)  # the request is in the worker pool now
            assert not in_flight.done()
            signalled = time.monotonic()
            proc.p.send_signal(signal.SIGTERM)

            assert next(watch).status == NOT_SERVING  # health goes first
            watch.cancel()
            time.sleep(0.2)
            with pytest.raises(grpc.RpcError) as e:
                stub.ListModels(pb.ListModelsRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE

            resp = in_flight.result()  # finished, not cut off
            finished = time.monotonic()
            assert resp.handle and len(resp.images) == 12
            assert finished > signalled
        assert proc.p.wait(30) == 0
        assert "draining" in proc.log.read_text()
    finally:
        proc.stop()


def test_unknown_model_fails_startup():
    r = run_cli("serve", "--port", str(free_port()), "--model", "no/such-model")
    assert r.returncode == 1
    assert "no/such-model" in r.stderr


def test_taken_port_fails_startup(server):
    port = server.rsplit(":", 1)[1]
    r = run_cli("serve", "--port", port, "--model", QWEN2)
    assert r.returncode == 1
    assert "in use" in r.stderr
