"""Several replicas and the multi-target client, all on 127.0.0.1: Preprocess balanced
round-robin over the healthy ones, Assemble/Release sent to the replica named in the
handle, FAILED_PRECONDITION naming the owner when a handle reaches another replica, a
killed replica skipped, a DNS name standing for its addresses, and two-phase flows 100%
OK while one replica drains and restarts (``tests/replica_drill.py``)."""

from __future__ import annotations

import signal
import time
from collections import Counter

import grpc
import pytest

import imagegen
from replica_drill import MODEL, drill, start_replicas
from servers import LOOPBACK, Server, wait_until
from sglang_mm_grpc.core import owners
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from sglang_mm_grpc.client import Client

RAW = imagegen.jpeg(160, 120, seed=4)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    servers = start_replicas(tmp_path_factory.mktemp("replicas"), 3, "--cache-bytes", "0")
    yield servers
    for s in servers:
        s.stop()


def test_preprocess_is_balanced_and_assemble_goes_to_the_owner(replicas):
    with Client([s.target for s in replicas], health_interval=0.2) as c:
        c.wait_until_serving(60)
        owners_seen = Counter()
        for _ in range(15):
            r = c.preprocess(MODEL, [RAW])
            owner = owners.owner_of(r.handle)
            owners_seen[owner.replica] += 1
            payload = c.assemble(r.handle, "vllm")
            assert list(payload.input_ids) == list(r.input_ids)
            assert c.release(r.handle)
        assert sorted(owners_seen.values()) == [5, 5, 5], owners_seen  # round-robin
        assert set(owners_seen) == {owners.default_replica_id(s.port) for s in replicas}


def test_another_replicas_handle_is_failed_precondition_naming_the_owner(replicas):
    a, b = replicas[:2]
    with grpc.insecure_channel(a.target, LOOPBACK) as ch_a, grpc.insecure_channel(b.target, LOOPBACK) as ch_b:
        kept = pb_grpc.MultimodalPreprocessorStub(ch_a).Preprocess(
            pb.PreprocessRequest(model=MODEL, images=[pb.MediaItem(data=RAW)]), timeout=30)
        other = pb_grpc.MultimodalPreprocessorStub(ch_b)
        for call in (lambda: other.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_VLLM), timeout=30),
                     lambda: other.Release(pb.ReleaseRequest(handle=kept.handle), timeout=30)):
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert f"belongs to replica {owners.default_replica_id(a.port)}" in e.value.details()
    with Client([b.target, a.target]) as c:  # the client finds the owner itself
        for _ in range(2):  # on either replica, round robin
            assert c.release(c.preprocess(MODEL, [RAW]).handle)


def test_one_shot_calls_need_no_affinity(replicas):
    with Client([s.target for s in replicas]) as c:
        for _ in range(6):
            r = c.preprocess(MODEL, [RAW], backend="sglang")
            assert r.payload.WhichOneof("mm_inputs") == "sglang" and not r.handle


def test_a_dns_name_stands_for_its_addresses(replicas):
    port = replicas[0].port
    with Client(f"localhost:{port}", resolve=True, health_interval=0.2) as c:
        targets = [ep.target for ep in c.endpoints.endpoints]
        assert f"127.0.0.1:{port}" in targets  # (and [::1] where localhost has it: nothing listens there)
        for _ in range(4):
            r = c.preprocess(MODEL, [RAW])
            assert c.release(r.handle)


def test_a_killed_replica_is_skipped(tmp_path, replicas):
    extra = Server(tmp_path, "--cache-bytes", "0", models=[MODEL], name="doomed")
    targets = [extra.target] + [s.target for s in replicas[:2]]
    with Client(targets, health_interval=0.2) as c:
        c.wait_until_serving(60)
        kept = None
        for _ in range(3):
            r = c.preprocess(MODEL, [RAW])
            if owners.owner_of(r.handle).replica == owners.default_replica_id(extra.port):
                kept = r.handle
            else:
                c.release(r.handle)
        assert kept is not None
        extra.kill()
        t = time.monotonic()
        for _ in range(12):  # every one served by the others, the dead one's refusal retried at once
            r = c.preprocess(MODEL, [RAW])
            assert owners.owner_of(r.handle).replica != owners.default_replica_id(extra.port)
            c.assemble(r.handle, "vllm", release=True)
        assert time.monotonic() - t < 30
        with pytest.raises(grpc.RpcError) as e:  # its handles went with it
            c.assemble(kept, "vllm")
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert wait_until(lambda: c.endpoints.endpoints[0].serving is False, 5)


def test_two_phase_flows_all_ok_while_a_replica_drains_and_restarts(tmp_path):
    r = drill(tmp_path, replicas=3, threads=4, drain_delay=2.0, settle_s=1.5, health_interval=0.2)
    assert r.timeline["exit_code"] == 0
    assert r.outcomes == {"OK": r.flows}, (r.outcomes, r.errors[:5])
    assert r.flows >= 40
    assert r.drained in r.served_before and r.drained in r.served_after, (r.served_before, r.served_after)
